"""Which upstream 4xx to a rewritten request can be the rewrite's doing (``policy.rejection``).

Only those are resent with the client's own request; any other 4xx names what the client's
own request carries too (the bodies below are the providers' own, as real traffic shows them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tooldisco.policy import native
from tooldisco.policy.rejection import error_text, rewrite_named

SEARCH = "gateway_search_tools"
DISPATCHER = "gateway_call_tool"
DEFERRED = ["mcp__github__create_issue", "mcp__weather__get_forecast"]
NAMES = [SEARCH, DISPATCHER, *DEFERRED]


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def chat(tools: list[str], **extra: Any) -> str:
    return json.dumps({"model": "gpt-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
                       "tools": [{"type": "function", "function": {"name": n, "parameters": {}}} for n in tools],
                       **extra})


# The client sent every tool; the proxy forwarded one of them, the search tool and the dispatcher.
CHAT_ORIGINAL = chat(["read_file", *DEFERRED])
CHAT_SENT = chat(["read_file", SEARCH, DISPATCHER])


def openai(message: str, param: str | None = None, code: str | None = None) -> bytes:
    return dumps({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})


def anthropic(message: str) -> bytes:
    return dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}})


def gemini(message: str, status: str = "INVALID_ARGUMENT", code: int = 400, **error: Any) -> bytes:
    return dumps({"error": {"code": code, "message": message, "status": status, **error}})


def named(error: bytes, original: str = CHAT_ORIGINAL, sent: str = CHAT_SENT, names=NAMES) -> str | None:
    return rewrite_named(error, original, sent, names)


# --- errors the rewrite can have caused: resent -----------------------------------------------

RESENT = {
    "openai chat: a tool's name": openai("Invalid 'tools[3].function.name': string does not match pattern. "
                                         "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                                         "tools[3].function.name", "invalid_value"),
    "openai chat: tool_choice naming a deferred tool": openai(
        f"Invalid value for 'tool_choice': function '{DEFERRED[0]}' not found.", "tool_choice"),
    "openai chat: too many tools": openai("Invalid 'tools': array too long. Expected an array with maximum length "
                                          "128, but got an array with length 300 instead.", "tools", "array_above_max_length"),
    "openai responses: defer_loading": openai("Unknown parameter: 'tools[3].defer_loading'.",
                                              "tools[3].defer_loading", "unknown_parameter"),
    "openai responses: tool_search": openai("Tool 'tool_search' is not supported with model 'gpt-4.1'.", "tools[9]"),
    "openai responses: tool_search_output": openai("Invalid type for 'input[4]': tool_search_output is not supported.",
                                                   "input[4]"),
    "openai responses: allowed_tools": openai("Invalid 'tool_choice.tools[0].name'.", "tool_choice.tools[0].name"),
    "anthropic: defer_loading": anthropic("tools.3.custom.defer_loading: Extra inputs are not permitted"),
    "anthropic: tool_reference": anthropic("messages.3.content.0.tool_result.content.0: Input tag 'tool_reference' "
                                           "found using 'type' does not match any of the expected tags"),
    "anthropic: the search tool by name": anthropic(f"Tool names must be unique: {SEARCH}"),
    "gemini: a function declaration": gemini("* GenerateContentRequest.tools[0].function_declarations[3].name: "
                                             "Invalid function name. Must start with a letter or an underscore."),
    "gemini: a field violation's path alone": gemini("Request contains an invalid argument.", details=[
        {"@type": "type.googleapis.com/google.rpc.BadRequest",
         "fieldViolations": [{"field": "tools[0].function_declarations[3].parameters", "description": "bad"}]}]),
    "gemini: the dispatcher's schema": gemini('Invalid JSON payload received. Unknown name "parametersJsonSchema" '
                                              "at 'tools[0].function_declarations[4]': Cannot find field."),
    "gemini: toolConfig": gemini("tool_config.function_calling_config.allowed_function_names: not found"),
    "bedrock: a tool's name": dumps({"message": "The model returned the following errors: tools.2.name: String "
                                                "should match pattern '^[a-zA-Z0-9_-]{1,64}$'"}),
    "bedrock converse: toolConfig": dumps({"message": "1 validation error detected: Value at "
                                                      "'toolConfig.tools.2.member.toolSpec.name' failed to satisfy "
                                                      "constraint"}),
    "a deferred tool by name": openai(f"Function '{DEFERRED[1]}' not found."),
    "the dispatcher by name": anthropic(f"{DISPATCHER}: input_schema is invalid"),
    "a validation error's location": dumps({"detail": [{"loc": ["body", "tools", 3], "msg": "Field required"}]}),
    "plain text": b"400 Bad Request: tools[2] is invalid",
}


@pytest.mark.parametrize("error", RESENT.values(), ids=RESENT.keys())
def test_an_error_naming_the_rewrite_is_the_rewrites(error):
    assert named(error) is not None


# --- errors the client's own request gets too: passed ------------------------------------------

PASSED = {
    # A tool the request never had (the client's own tool_choice): its own request gets the same.
    "openai chat: tool_choice naming no tool of the request": openai(
        "Invalid value for 'tool_choice': function 'get_weather' not found.", "tool_choice"),
    # One client tool's schema, forwarded as the client wrote it.
    "openai responses: a client tool's schema": openai(
        "Invalid schema for function 'read_file': In context=(), 'required' is required to be supplied and to be "
        "an array including every key in properties. Missing 'unit'.", "tools[0].parameters",
        "invalid_function_parameters"),
    "openai: max_tokens unsupported": openai("Unsupported parameter: 'max_tokens' is not supported with this model. "
                                             "Use 'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter"),
    "openai: temperature unsupported": openai("Unsupported value: 'temperature' does not support 0.2 with this model. "
                                              "Only the default (1) value is supported.", "temperature",
                                              "unsupported_value"),
    "openai: an invalid model id": openai("The requested model 'gpt-9' does not exist.", "model", "model_not_found"),
    # 'function' and 'tool' are roles here, not the request's tools
    "openai: a bad message role": openai("Invalid value: 'bot'. Supported values are: 'system', 'assistant', 'user', "
                                         "'function', 'tool', and 'developer'.", "messages[1].role", "invalid_value"),
    "openai responses: an effort level": openai("Unsupported value: 'minimal' is not supported with the 'o3' model. "
                                                "Supported values are: 'low', 'medium', and 'high'.",
                                                "reasoning.effort", "unsupported_value"),
    "anthropic: max_tokens": anthropic("max_tokens: 100000 > 64000, which is the maximum allowed number of output "
                                       "tokens for claude-sonnet-4-5-20250929"),
    "anthropic: a thinking budget": anthropic("thinking.budget_tokens: Input should be greater than or equal to 1024"),
    "gemini: a key": gemini("API key not valid. Please pass a valid API key.", details=[
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
         "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}]),
    "gemini: 429": gemini("You exceeded your current quota, please check your plan and billing details.",
                          "RESOURCE_EXHAUSTED", 429),
    "gemini: a generation setting": gemini("* GenerateContentRequest.generation_config.temperature: must be <= 2"),
    "bedrock: temperature": dumps({"message": "ValidationException: Malformed input request: #/temperature: "
                                              "expected maximum: 1, found: 2, please reformat your input and try again."}),
    "not json": b"<html><body><h1>400 Bad Request</h1></body></html>",
    "empty": b"",
}


@pytest.mark.parametrize("error", PASSED.values(), ids=PASSED.keys())
def test_an_error_naming_what_the_client_sent_as_it_is_is_not_the_rewrites(error):
    assert named(error) is None


# --- what the proxy changed, found from the two bodies -------------------------------------------


def test_a_top_level_member_the_proxy_changed_is_the_rewrites():
    original = chat(["read_file"], previous_response_id="resp_client")
    sent = chat(["read_file"], previous_response_id="resp_head")  # chained from the real head
    error = openai("Previous response with id 'resp_head' not found.", "previous_response_id")
    assert named(error, original, sent) == "previous_response_id"
    assert named(error, original, original) is None  # the client's own: the same error either way


def test_the_conversation_is_the_rewrites_only_when_the_proxy_changed_it():
    error = openai("Invalid value: 'bot'.", "messages[1].role")
    grown = json.loads(CHAT_SENT)
    grown["messages"].append({"role": "tool", "tool_call_id": "call_s", "content": "found"})  # a hidden round
    assert named(error, CHAT_ORIGINAL, json.dumps(grown)) == "messages"
    assert named(error) is None


def test_a_field_in_another_spelling_is_the_same_field():
    original = json.dumps({"contents": [], "systemInstruction": {"parts": [{"text": "a"}]}})
    sent = json.dumps({"contents": [], "systemInstruction": {"parts": [{"text": "b"}]}})
    assert named(gemini("* GenerateContentRequest.system_instruction: too long"), original, sent) == "systemInstruction"


def test_a_tool_the_proxy_removed_is_named_from_the_bodies():
    """Relevance keeps some tools and drops the rest: no name list says which were dropped."""
    original, sent = chat(["read_file", "write_file", "delete_file"]), chat(["read_file"])
    assert named(openai("Function 'delete_file' is invalid."), original, sent, []) == "delete_file"
    assert named(openai("Function 'read_file' is invalid."), original, sent, []) is None  # forwarded as it was


@pytest.mark.parametrize("original, sent", [
    # Gemini: declarations in a tool
    (json.dumps({"tools": [{"functionDeclarations": [{"name": "a"}, {"name": "gone"}]}]}),
     json.dumps({"tools": [{"functionDeclarations": [{"name": "a"}]}]})),
    # Bedrock Converse: toolConfig.tools[].toolSpec
    (json.dumps({"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}, {"toolSpec": {"name": "gone"}}]}}),
     json.dumps({"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}]}})),
    # Anthropic / Responses: tools[].name
    (json.dumps({"tools": [{"name": "a"}, {"name": "gone"}]}), json.dumps({"tools": [{"name": "a"}]})),
])
def test_removed_tools_are_found_in_every_apis_shape(original, sent):
    assert named(b'{"message": "gone: bad"}', original, sent, []) == "gone"


def test_names_match_whole_and_exact():
    assert named(openai(f"x_{SEARCH} is bad")) is None  # part of another name
    assert named(openai(SEARCH.upper())) is None  # another name
    assert named(openai(f"'{SEARCH}' is bad")) == SEARCH
    dotted = "default_api.lookup"
    assert named(openai(f"Function {dotted}: bad"), names=[dotted]) == dotted
    assert named(openai(f"Function {dotted}x: bad"), names=[dotted]) is None


def test_the_words_of_an_error_are_its_values_not_its_keys():
    """An error's own keys (``metadata``, ``type``) are no fields of the request."""
    original, sent = chat([], metadata={"a": "1"}), chat([], metadata={"a": "2"})
    error = dumps({"error": {"message": "bad request", "type": "invalid_request_error", "metadata": {}}})
    assert named(error, original, sent) is None
    assert "metadata" not in error_text(error) and "bad request" in error_text(error)


def test_bodies_that_are_no_json_leave_the_names():
    assert named(openai("Invalid value: 'bot'.", "messages[1].role"), "not json", "{") is None
    assert named(openai(f"{SEARCH}: bad"), "not json", "{") == SEARCH


def test_a_huge_error_is_read_to_a_bound():
    error = anthropic("x" * 200_000 + " tools.3: bad")
    assert named(error) is None  # past what is read


def test_a_refusal_of_native_deferral_is_one_of_the_rewrites():
    for error in (RESENT["anthropic: defer_loading"], RESENT["openai responses: tool_search"],
                  RESENT["gemini: the dispatcher's schema"]):
        assert native.refused(400, error) and named(error) is not None
    assert not native.refused(400, RESENT["openai chat: a tool's name"])
    assert not native.refused(422, RESENT["anthropic: defer_loading"])
