"""The openai_chat wire API: its adapter, stream codec and stitcher."""
