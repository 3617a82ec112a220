"""Helpers ``tests/unit/apis/openai_responses/test_adapter.py`` and other unit tests share."""

from __future__ import annotations



P = "gateway_search_tools"


ENCRYPTED = "gAAAAABpIr3mZ0qT4yXbVnKc8Q2w1" + "x" * 40


def usage_of(inputs: int, cached: int, outputs: int, reasoning: int) -> dict:
    return {"input_tokens": inputs, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": outputs, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": inputs + outputs}


def response(*output: dict, rid: str = "resp_1", usage: dict | None = None, **over) -> dict:
    base = {
        "id": rid, "object": "response", "created_at": 1763801000, "status": "completed", "error": None,
        "incomplete_details": None, "instructions": "You are Codex.", "model": "gpt-5-codex", "output": list(output),
        "parallel_tool_calls": False, "previous_response_id": None, "store": False, "temperature": 1.0,
        "tool_choice": "auto", "tools": [{"type": "function", "name": P, "description": "search", "parameters": {},
                                          "strict": False}],
        "top_p": 1.0, "truncation": "disabled",
        "usage": usage or usage_of(1000, 800, 50, 30),
        "metadata": {},
    }
    base.update(over)
    return base


def reasoning(rid: str = "rs_1", encrypted: str | None = ENCRYPTED) -> dict:
    return {"id": rid, "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Searching tools**"}],
            "encrypted_content": encrypted}


def call(name: str = P, call_id: str = "call_S1", args: str = '{"query":"slack post message"}', **extra) -> dict:
    return {"id": f"fc_{call_id}", "type": "function_call", "status": "completed", "arguments": args,
            "call_id": call_id, "name": name, **extra}


def message(text: str, mid: str = "msg_1") -> dict:
    return {"id": mid, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]}
