"""Sans-IO stream codecs, one module per wire format.

Each decoder takes response bytes cut anywhere (``feed(bytes) -> [Event]``,
``feed(b"")`` at the end) and assembles the API's own non-streaming response
object (``message()``), so the engine handles one shape per API. Each module's
``encode`` turns such an object back into a stream in the API's exact grammar,
for when the proxy synthesises what the client receives.

- ``sse``: generic SSE framing; ``eventstream``: AWS binary event-stream framing
- ``anthropic``, ``openai_chat``, ``openai_responses``, ``gemini``, ``bedrock``: the APIs
"""

from .common import Event, IncompleteStream, StreamError

__all__ = ["Event", "IncompleteStream", "StreamError"]
