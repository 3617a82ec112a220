"""The anthropic wire API: its adapter, stream codec and stitcher."""
