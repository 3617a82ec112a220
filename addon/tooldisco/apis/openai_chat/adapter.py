"""OpenAI Chat Completions (``POST /v1/chat/completions``) and compatible servers."""

from __future__ import annotations

import json
from typing import Any, Callable, Collection, Iterable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import ADMIT_WHEN_FULL, MiB, derived_size, memoize
from tooldisco.apis.base import CallThrough, Failure, Stitcher
from tooldisco.apis.streaming import as_dict, as_list
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.text import History, user_text
from tooldisco.apis.defaults import AdapterDefaults
from tooldisco.apis.schema import params_of, query_schema
from tooldisco.apis.catalogs import each_tool, load_request, named
from tooldisco.apis.splice import append_array, replace_array, wrap_history
from tooldisco.apis.usage import sum_usage, prompt_split, tokens, usage_object
from tooldisco.apis.openai_shared import forced_names, openai_error_object, parse_arguments
from tooldisco.apis.openai_chat.stream import ChatCompletionStreamDecoder
from tooldisco.apis.openai_chat.stream import encode
from tooldisco.apis.base import dispatcher_schema
from tooldisco.apis.openai_chat.stitch import ChatStitcher
from tooldisco.apis.base import Dispatcher
from tooldisco.core.types import Target


def _texts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return []


@memoize(16 * MiB, sizeof=derived_size, admit_when_full=ADMIT_WHEN_FULL)  # a catalog too big for it still hits
def parse_tool(raw: str) -> Tool:
    return tool_of(raw, json.loads(raw))


def tool_of(raw: str, d: Any) -> Tool:
    """The tool a definition text (``raw``, decoded: ``d``) defines."""
    if not isinstance(d, dict):
        raise Unsupported("a tool is not an object")
    if d.get("type") != "function":
        # custom / built-in tool types: pass through, never deferred.
        kind = str(d.get("type"))
        inner = d.get(kind)
        name = d.get("name") or (inner.get("name") if isinstance(inner, dict) else None)
        return Tool(str(name or f"<{kind}>"), raw, pinned="builtin")
    fn = d.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise Unsupported("a function tool has no name")
    desc = fn.get("description")
    return Tool(fn["name"], raw, desc if isinstance(desc, str) else "", params_of(fn.get("parameters")))


_BUILD = each_tool(tool_of)

# The members of an assistant message the API reads back as input.
_INPUT_FIELDS = frozenset({"role", "content", "refusal", "name", "tool_calls", "function_call", "audio"})


def _first_message(completion: dict[str, Any]) -> dict[str, Any]:
    """The first choice's message (``{}`` when the completion has none)."""
    choices = as_list(completion.get("choices"))
    return as_dict(as_dict(choices[0]).get("message")) if choices else {}


def _calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls that are objects."""
    return [tc for tc in as_list(message.get("tool_calls")) if isinstance(tc, dict)]


def _edit_calls(message: dict[str, Any], edit: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
    """A completion with each choice's tool calls edited (``edit``: the call as it stays, or
    None: removed); a choice left without calls stops as "stop", not "tool_calls"."""
    out = dict(message)
    choices = []
    for choice in as_list(message.get("choices")):
        if not isinstance(choice, dict):
            choices.append(choice)
            continue
        choice = dict(choice)
        if "message" not in choice:  # a choice without a message (a content filter's) stays so
            choices.append(choice)
            continue
        msg = dict(as_dict(choice.get("message")))
        calls = _calls_of(msg)
        kept = [e for tc in calls if (e := edit(tc)) is not None]
        if msg.get("tool_calls") is not None and (len(kept) < len(calls) or kept != calls):
            if kept:
                msg["tool_calls"] = kept
            else:  # every call was hidden: none is left to show, and the stop says so
                msg.pop("tool_calls")
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
        choice["message"] = msg
        choices.append(choice)
    out["choices"] = choices
    return out


def _called(tc: Any) -> Any:
    """The tool a history call names (None when it is not a function call)."""
    return as_dict(as_dict(tc).get("function")).get("name")


@memoize(4 * MiB)
def _history_calls(text: str) -> tuple[str, ...]:
    """The tools a history message calls (none unless it is an assistant turn)."""
    message = json.loads(text)
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return ()
    return tuple(name for tc in as_list(message.get("tool_calls")) if isinstance(name := _called(tc), str))


@memoize(16 * MiB)
def _wrapped_message(text: str, dispatcher: str, names: frozenset[str]) -> str:
    """An assistant message with its calls of ``names`` as the dispatcher calls they were made as."""
    message = json.loads(text)
    message["tool_calls"] = [_dispatched(tc, dispatcher) if _called(tc) in names else tc
                             for tc in as_list(message.get("tool_calls"))]
    return jsonspan.dumps(message)


def _dispatched(tc: dict[str, Any], dispatcher: str) -> dict[str, Any]:
    """A history call of a deferred tool as the dispatcher call it was made as: its arguments
    text placed as it is when it is an object's text (else as a string), so the same history
    always gives the same bytes."""
    fn = as_dict(tc.get("function"))
    args = fn.get("arguments")
    if isinstance(args, str) and args.strip():
        text = args.strip() if isinstance(parse_arguments(args), dict) else jsonspan.dumps(args)
    elif args is not None and not isinstance(args, str):  # the object itself (compatible servers take it)
        text = jsonspan.dumps(args)
    else:
        text = "{}"
    inner = '{"name":' + jsonspan.dumps(fn.get("name")) + ',"arguments":' + text + "}"
    return {**tc, "function": {**fn, "name": dispatcher, "arguments": inner}}


class OpenAIChatAdapter(AdapterDefaults):
    api = "openai_chat"

    def call_through(self) -> CallThrough:
        return self

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def parse(self, body: str) -> RequestView:
        data, catalog = load_request(body, self.api, _BUILD, history="messages")
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise Unsupported("no messages array")
        history = History()
        for m in messages:
            if not isinstance(m, dict):
                continue
            role = m.get("role")
            if role == "user":
                history.user(user_text(_texts(m.get("content"))))
            elif role == "assistant":
                for tc in as_list(m.get("tool_calls")):
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    if isinstance(fn, dict):
                        history.calls[str(tc.get("id"))] = str(fn.get("name"))
            elif role == "tool":
                history.answered.add(str(m.get("tool_call_id")))
        stream = data.get("stream") is True
        return history.view(catalog, forced_names(data.get("tool_choice")), stream, data.get("prompt_cache_key"),
                            model=data.get("model"))

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        return replace_array(body, ["tools"], raws)

    def phantom_tool(self, name: str, description: str) -> str:
        return jsonspan.dumps(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": query_schema(),
                },
            }
        )

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        out = []
        for tc in _calls_of(_first_message(message)):
            fn = as_dict(tc.get("function"))
            out.append(ToolCall(str(tc.get("id")), str(fn.get("name")), parse_arguments(fn.get("arguments"))))
        return out

    def append_round(
        self, body: str, message: dict[str, Any], results: Sequence[ToolResult], add_raws: Sequence[str]
    ) -> str:
        msg = message["choices"][0]["message"]
        # Only fields the API accepts on an input assistant message.
        assistant: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
        if msg.get("refusal"):
            assistant["refusal"] = msg["refusal"]
        calls = [
            {"id": tc["id"], "type": "function", "function": {"name": tc["function"]["name"],
                                                               "arguments": tc["function"].get("arguments", "")}}
            for tc in msg.get("tool_calls") or []
        ]
        if calls:  # the API refuses an empty list (a turn replayed without its calls: ``rounds``)
            assistant["tool_calls"] = calls
        # Every tool_call id needs a role:"tool" message before the next turn.
        tool_msgs = [
            jsonspan.dumps({"role": "tool", "tool_call_id": r.call.id, "content": r.content}) for r in results
        ]
        body = append_array(body, ["messages"], [jsonspan.dumps(assistant), *tool_msgs])
        return append_array(body, ["tools"], add_raws) if add_raws else body

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        hidden = set(names)
        return _edit_calls(message, lambda tc: None if named(as_dict(tc.get("function")).get("name"), hidden) else tc)

    def unwrap(self, message: dict[str, Any], resolve: Callable[[ToolCall], Target | str | None]) -> dict[str, Any]:
        def real(tc: dict[str, Any]) -> dict[str, Any] | None:
            fn = as_dict(tc.get("function"))
            target = resolve(ToolCall(str(tc.get("id")), str(fn.get("name")), parse_arguments(fn.get("arguments"))))
            if target is None:
                return tc
            if isinstance(target, str):
                return None
            return {**tc, "function": {**fn, "name": target.name, "arguments": target.text}}

        return _edit_calls(message, real)

    def wrap(self, body: str, names: Collection[str], dispatcher: str) -> str:
        return wrap_history(body, ["messages"], names, dispatcher, '"tool_calls"', _history_calls, _wrapped_message)

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out = dict(rounds[-1])
        out["id"] = rounds[0].get("id", out.get("id"))
        choices = as_list(out.get("choices"))
        if choices and isinstance(choices[0], dict):
            last = dict(choices[0])
            msg = dict(as_dict(last.get("message")))
            texts = [text for r in rounds if isinstance(text := _first_message(r).get("content"), str) and text]
            if texts or "content" in msg:  # a message the last round left without text keeps none
                msg["content"] = "\n\n".join(texts) if texts else msg.get("content")
            calls = [tc for r in rounds for tc in as_list(_first_message(r).get("tool_calls"))]
            if calls:
                msg["tool_calls"] = calls
            if msg or "message" in last:  # a choice without a message (a content filter's) stays so
                last["message"] = msg
            out["choices"] = [last, *choices[1:]]
        usage = sum_usage(r.get("usage") for r in rounds)
        if usage is not None:
            out["usage"] = usage
        return out

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """``prompt_tokens`` includes the cached part: split out. Where compatible providers put
        it: OpenAI, xAI, OpenRouter, Mistral in ``prompt_tokens_details.cached_tokens`` (OpenRouter
        also ``cache_write_tokens``), DeepSeek in ``prompt_cache_hit_tokens``, Moonshot and Together
        in a top-level ``cached_tokens``. A stream whose provider put usage in its choice
        (Moonshot) has it there. None: no usage (a stream without ``include_usage``)."""
        counts = usage_object(message)
        if counts is None:
            first = next((c for c in as_list(as_dict(message).get("choices")) if usage_object(c)), None)
            counts = usage_object(first)
        if counts is None:
            return None
        details = as_dict(counts.get("prompt_tokens_details"))
        if "prompt_cache_hit_tokens" in counts:
            cached = tokens(counts.get("prompt_cache_hit_tokens"))
        elif "cached_tokens" in details:
            cached = tokens(details.get("cached_tokens"))
        else:
            cached = tokens(counts.get("cached_tokens"))
        reasoning = tokens(as_dict(counts.get("completion_tokens_details")).get("reasoning_tokens"))
        return prompt_split(tokens(counts.get("prompt_tokens")), tokens(counts.get("completion_tokens")),
                            counts.get("total_tokens"), cached, tokens(details.get("cache_write_tokens")), reasoning)

    def shown(self, message: dict[str, Any]) -> list[Any]:
        return [_first_message(message)]

    def comparable(self, entries: list[Any]) -> list[Any]:
        """What an input assistant message carries: fields only answers have (``annotations``)
        are the client's to drop, and so are a call's extras; no text is no text, whether a
        client writes it ``""`` or ``null`` (a stream's assembly gives either)."""
        out = []
        for m in entries:
            m = {k: v for k, v in as_dict(m).items() if k in _INPUT_FIELDS and not (k == "content" and v == "")}
            if "tool_calls" in m:
                m["tool_calls"] = [{"id": tc.get("id"), "type": tc.get("type"), "function": tc.get("function")}
                                   for tc in _calls_of(m)]
            out.append(m)
        return out

    def decoder(self) -> StreamDecoder:
        return ChatCompletionStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode(message, include_usage=message.get("usage") is not None)

    def dispatcher_tool(self, name: str, description: str) -> str:
        return jsonspan.dumps({"type": "function",
                               "function": {"name": name, "description": description, "parameters": dispatcher_schema()}})

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
        body = {"error": openai_error_object(failure)}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def stitcher(self, phantom: str, body: str, dispatch: Dispatcher | None = None) -> Stitcher:
        return ChatStitcher(phantom, dispatch)
