"""The gemini wire API: its adapter, stream codec and stitcher."""
