"""``AdapterDefaults``: what an adapter does when its API has nothing of its own to say (no
server-side conversation, usage only in the body). Apart: a base class the adapters inherit,
not a helper they call."""

from __future__ import annotations

from typing import Any, Sequence

from tooldisco.core import jsonspan
from tooldisco.apis.base import CallThrough, Failure, NativeDeferral


class AdapterDefaults:
    """What most APIs do: no conversation kept on the server, usage only in the body."""

    echoes = False

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Headers and JSON body of an HTTP error answer in the API's own format, so that the
        client's SDK raises the error it retries (each API overrides it with its shape)."""
        body = {"error": {"type": "api_error", "code": failure.status, "message": failure.text()}}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def usage_headers(self, message: dict[str, Any]) -> dict[str, str]:
        return {}

    def native_deferral(self) -> NativeDeferral | None:
        """None: no native deferral (``apis.base.NativeDeferral``); the APIs with it return themselves."""
        return None

    def call_through(self) -> CallThrough | None:
        """None: no call-through (``apis.base.CallThrough``); the APIs with it return themselves."""
        return None

    def response_id(self, message: dict[str, Any]) -> str | None:
        return None

    def owed_results(self, body: str, results: Sequence[Any]) -> list[str]:
        return []

    def with_owed_results(self, body: str, items: Sequence[str]) -> str:
        return body

    def restore_echo(self, response: str, body: str) -> str:
        return response

    def chain_from(self, body: str, response_id: str) -> str:
        return body

    def history_path(self, body: str) -> tuple[str, ...] | None:
        return ("messages",)

    def produced(self, entry: Any) -> bool:
        return isinstance(entry, dict) and entry.get("role") == "assistant"

    def comparable(self, entries: list[Any]) -> list[Any]:
        return entries

    #: Where one model turn's results go: inside one entry, as the items of this member
    #: (Anthropic, Bedrock: ``content``; Gemini: ``parts``), or None: an entry each (Chat's
    #: ``tool`` messages, Responses' ``function_call_output`` items).
    results_member: str | None = None

    def adopt(self, restored: list[str], client: Sequence[str], hidden: Sequence[str] = ()) -> list[str]:
        return restored

    def with_hidden_results(self, made: Sequence[str], hidden: Sequence[str],
                            following: Sequence[str]) -> list[str] | None:
        """The client's entries after a restored turn (``made``: its real entries), answering
        that turn as it was made: the results of the calls the client never saw (a mixed
        turn's ``hidden``, entries as ``append_round`` made them) put first. None when there
        are such results and no results entry follows, or not in the shape this API answers
        calls with: the turn then passes as the client sent it. Results are matched by call id
        here, so nothing else changes."""
        if not hidden:
            return list(following)
        if not following:
            return None
        key = self.results_member
        if key is None:
            return [*hidden, *following]
        ours, theirs = jsonspan.find(hidden[0], [key]), jsonspan.find(following[0], [key])
        if ours is None or theirs is None or hidden[0][ours[0]] != "[" or following[0][theirs[0]] != "[":
            return None
        items = [hidden[0][a:b] for a, b in jsonspan.elements(hidden[0], ours)]
        inner = following[0][theirs[0] + 1 : theirs[1] - 1].strip()
        merged = "[" + ",".join(items) + ("," + inner if inner else "") + "]"
        return [jsonspan.replace(following[0], theirs, merged), *following[1:]]
