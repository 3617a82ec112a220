"""The openai_responses wire API: its adapter, stream codec and stitcher."""
