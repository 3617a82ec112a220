"""The glue's addons in chain order: what mitmproxy's script (``tooldisco/script/tool_discovery.py``,
``addon/tool_discovery.py`` in a checkout) loads.

``build`` makes the glue's addons (``tooldisco.glue``, one concern each) in the order their hooks must
run. mitmproxy runs a script's addons where the script sits in its chain, early: before
map_remote and modify_headers. Two addons go to the chain's end once mitmproxy runs: the live
router (``glue.live``: it routes a stream to the relay once the URL is final) and then the
watcher (``tooldisco.watch``: it annotates a flow after everything else ran).

Two ways an answer comes back through the loop:
- a JSON answer is buffered by mitmproxy, and the ``response`` hook runs the loop over it (``glue.buffered``);
- a stream is served live by the in-process relay, which makes the upstream calls itself (``glue.live``).
"""

from __future__ import annotations

from tooldisco.glue.background import Background
from tooldisco.glue.buffered import Buffered
from tooldisco.glue.gemini_key import GeminiKey
from tooldisco.glue.live import Live
from tooldisco.glue.metadata import FlowRecord
from tooldisco.glue.metrics import MetricsServer
from tooldisco.glue.options import DEFAULT_CONFIG, Options
from tooldisco.glue.redaction import Redaction
from tooldisco.glue.rewrite import Rewrite
from tooldisco.glue.timing import Timing
from tooldisco.glue.upstream import Upstream
from tooldisco.glue.usage import UsageTap
from tooldisco.glue.watching import Watching
from tooldisco.glue.websocket_gate import WebSocketGate
from tooldisco.glue.webui import WebUI
from tooldisco.watch.watch import Watcher

__all__ = ["DEFAULT_CONFIG", "build"]


def build() -> list[object]:
    """The addons, in chain order. Within a hook they run in this order: the config first (every
    other addon reads its engine); the flow's record before any hook that reads it; the WebSocket
    gate and the Gemini key in ``requestheaders``; the rewrite in ``request``; in ``response``,
    the relayed flow's real URL is shown, the first round's upstream time is read, and then the
    loop completes a buffered answer; the loop's addon closes the flow's record last."""
    background = Background()
    options = Options(background)
    watch = Watcher(lambda: options.engine.config.tool_discovery if options.engine else None)
    upstream = Upstream(background, watch)
    return [
        options,
        MetricsServer(options),  # serves the engine's metrics: after the addon that builds it
        Redaction(),
        WebUI(),  # after Redaction: it puts mitmweb's own login URL back in the log lines Redaction masked
        upstream,
        FlowRecord(),
        WebSocketGate(options),
        GeminiKey(options),
        Rewrite(options, background, watch),
        Live(options, upstream, background, watch),  # its running() adds the LiveRouter at the chain's end
        Timing(),  # the first round's upstream time, before UsageTap and Buffered close or complete the record
        UsageTap(options),  # after Live (which marks streams), before Buffered (which closes the flow's record)
        Buffered(options, upstream, watch),
        Watching(watch),  # its running() adds the watcher after the router
    ]

