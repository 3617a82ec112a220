"""The bedrock wire API: its adapter, stream codec and stitcher."""
