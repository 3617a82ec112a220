"""Wire framings the APIs share: SSE (``sse``) and the AWS binary event stream (``eventstream``)."""
