"""The request hook: the body decoded within its cap, planned by the engine (tools deferred,
the search tool injected), and re-signed when the client signed it with SigV4 (Bedrock)."""

from __future__ import annotations

from urllib.parse import urlsplit

from loguru import logger
from mitmproxy import http

from tooldisco.apis import registry
from tooldisco.apis.base import Adapter, Failure
from tooldisco.core import bodies
from tooldisco.engine.engine import Engine
from tooldisco.glue import messages, metadata
from tooldisco.glue.background import Background
from tooldisco.glue.options import Options
from tooldisco.net import sigv4
from tooldisco.policy.hosts import unlisted_host
from tooldisco.watch.watch import Watcher

REENCODABLE = frozenset({"gzip", "deflate", "br", "zstd", "identity"})  # a single one mitmproxy re-applies on set
WARNED_HOSTS_MAX = 100  # unlisted hosts warned about, remembered per process: bounded by count


class Rewrite:
    """Fails open: whatever goes wrong, the request goes out exactly as the client sent it."""

    name = "tooldisco_rewrite"

    def __init__(self, options: Options, background: Background, watch: Watcher) -> None:
        self._options = options
        self._background = background
        self._watch = watch
        self._warned: set[str] = set()

    async def request(self, flow: http.HTTPFlow) -> None:
        engine = self._options.engine
        if engine is None or flow.response or flow.error or not flow.live or flow.is_replay == "request":
            return
        meta = metadata.of(flow)
        host = meta.host if meta else flow.request.pretty_host
        adapter = engine.adapter_for(host, flow.request.method, flow.request.path)
        if adapter is None:
            self._warn_unlisted(flow, engine, host)
            return
        original = (flow.request.raw_content, flow.request.headers.copy(), flow.request.url, flow.server_conn)
        try:
            await self._rewrite(flow, engine, adapter, original[:2])
        except Exception:
            logger.exception("tool discovery failed; forwarding the request unchanged")
            self._watch.forget(flow)
            flow.request.raw_content, flow.request.headers, flow.request.url, flow.server_conn = original
            if (meta := metadata.of(flow)) is not None:
                meta.held = None

    def _warn_unlisted(self, flow: http.HTTPFlow, engine: Engine, host: str) -> None:
        """Once per host: tools sent to a host ``hosts:`` does not list pass unprocessed, which
        looks exactly like tool discovery working on nothing. Never fails the flow."""
        try:
            request = flow.request
            unlisted = unlisted_host(engine.config, host, request.method, request.path, request.raw_content)
            if unlisted is None or unlisted in self._warned or len(self._warned) >= WARNED_HOSTS_MAX:
                return
            self._warned.add(unlisted)
            # In reverse mode with keep_host_header, or after map_remote, the flow goes elsewhere
            # than the host the client asked for; ``hosts:`` is matched against the latter.
            going = request.host.lower().rstrip(".")
            via = f" (sent on to {going})" if going != unlisted else ""
            logger.warning("tool discovery: {}{} is not in hosts: requests with tools to it pass "
                           "unprocessed; add it (or a preset) to hosts: in {}",
                           unlisted, via, self._options.edit_hint)
        except Exception:
            logger.opt(exception=True).debug("unlisted-host check failed")

    def _unenforced(self, flow: http.HTTPFlow, engine: Engine, adapter: Adapter, why: str) -> bool:
        """A request the policy's deny could not be applied to: it goes as sent with a warning
        (``policy.fail: open``), or is refused in the API's own format, never sent upstream
        (``closed``); whether it was refused. Nothing to say without a deny in the policy."""
        policy = engine.config.policy
        if not policy.denies:
            return False
        if policy.fail == "closed":
            message = (f"the proxy's tool policy could not be applied to this request ({why}), "
                       "and policy.fail is closed")
            headers, body = adapter.error_body(Failure(403, message=message))
            flow.response = http.Response.make(403, body, messages.headers(headers))
            logger.warning("tool policy: a request to {} refused: {}", flow.request.pretty_host, why)
            return True
        logger.warning("tool policy not applied: a request to {} goes as sent, denied tools and all: {} "
                       "(policy.fail: closed refuses such requests)", flow.request.pretty_host, why)
        return False

    async def _rewrite(self, flow: http.HTTPFlow, engine: Engine, adapter: Adapter,
                       sent: tuple[bytes | None, http.Headers]) -> None:
        """``sent``: the body and headers as the client sent them (the fail-open resend)."""
        request = flow.request
        body = await messages.decoded(request, engine.config.max_body_bytes, "tool discovery skipped")
        if not body:
            if body is None:  # not an empty body: one the proxy could not read
                self._unenforced(flow, engine, adapter, "its body could not be read (see the line above)")
            return
        headers = messages.by_name(request.headers)
        aws = None
        # A changed body needs the client's signature made again, by us.
        if sigv4.is_signed(request.url, request.headers.items(multi=True)):
            aws = await sigv4.credentials()
            status, reason = sigv4.check("POST", request.url, request.headers.items(multi=True),
                                         request.raw_content or b"", aws)
            if status is sigv4.Status.CANNOT:
                logger.warning("tool discovery skipped: {}", reason)
                self._unenforced(flow, engine, adapter, "a changed body could not be signed again")
                return
        # On the planning pool (its tenant's share of worker threads): a first request on a large
        # catalog may build a search index, and session reads are disk I/O; a blocking call in a
        # hook would stall every flow.
        prepared = await engine.plan(adapter, headers, body, urlsplit(request.path).query)
        if prepared.record is not None and prepared.record.fallback_reason == "overloaded" \
                and self._unenforced(flow, engine, adapter, "planning is overloaded"):
            return
        if prepared.background is not None:
            self._background.spawn(prepared.background())
        if (record := prepared.record) is not None:
            record.model = record.model or registry.model_in_path(request.path)
            if prepared.context is None and record.outcome != "pending":
                # Upstream as the client sent it: the record waits for the answer's usage (``glue.usage``).
                if (meta := metadata.of(flow)) is not None:
                    meta.passed = metadata.Passed(record, adapter)
                else:
                    engine.close_record(record)
        self._watch.begin(flow, adapter, body, prepared.body, prepared.record,
                          prepared.context.phantom if prepared.context else "")
        if prepared.body is None:
            return
        codings = bodies.codings(request.headers.get("content-encoding"))
        if len(codings) > 1 or not set(codings) <= REENCODABLE:
            del request.headers["content-encoding"]  # codings mitmproxy cannot re-apply: sent plain
        request.content = prepared.body
        if aws is not None:  # signed by the client: signed again for the new body
            request.headers = messages.headers(messages.signed(request.url, request.headers.items(multi=True),
                                                               request.raw_content or b"", aws))
        if prepared.context is None:
            return
        # Live flows are routed by ``LiveRouter`` at the end of the chain, where the URL is final.
        meta = metadata.of(flow)
        if meta is None:  # no requestheaders hook ran (a flow driven by hand)
            meta = flow.metadata[metadata.KEY] = metadata.FlowMeta(host=request.pretty_host)
        meta.held = metadata.Held(prepared.context, aws, sent, live=prepared.context.stream)
