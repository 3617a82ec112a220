"""A fake LLM provider for end-to-end tests: real wire grammars, real validation,
a scripted model, and a record of every request.

    from tests.fakeprovider import FakeProvider, search, call, reply

    with FakeProvider() as fake:
        fake.set_script([search("weather"), call("get_weather", {"city": "Paris"}), reply("Done.")])
        ...  # point a client (or mitmdump's map-remote) at fake.url
        assert fake.api_requests()[0].json["tools"]
"""

from .model import DISPATCHER, ApiError, Conversation, Reply, ToolCall, ToolResult, Usage
from .script import SEARCH_TOOL, Call, Fail, Rule, Script, call, calls, fail, reply, search
from .server import FakeProvider, RecordedRequest

__all__ = [
    "ApiError",
    "DISPATCHER",
    "Call",
    "Conversation",
    "Fail",
    "FakeProvider",
    "RecordedRequest",
    "Reply",
    "Rule",
    "SEARCH_TOOL",
    "Script",
    "ToolCall",
    "ToolResult",
    "Usage",
    "call",
    "calls",
    "fail",
    "reply",
    "search",
]
