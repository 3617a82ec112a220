"""The engine: the composition root (``engine``), the request plan, the phantom loop and its runner."""
