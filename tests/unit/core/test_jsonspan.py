import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldisco.core import jsonspan


BODY = '{ "model" : "m",\n "tools": [ {"name":"a","x":1.50} , {"name":"b"} ],"messages":[],"k":"\\u00e9"}'


def test_find_and_elements_keep_exact_text():
    span = jsonspan.find(BODY, ["tools"])
    items = [BODY[a:b] for a, b in jsonspan.elements(BODY, span)]
    assert items == ['{"name":"a","x":1.50}', '{"name":"b"}']
    assert jsonspan.find(BODY, ["tools", 1, "name"]) is not None
    assert jsonspan.find(BODY, ["nope"]) is None
    assert jsonspan.find(BODY, ["tools", 5]) is None


def test_replace_keeps_every_other_byte():
    span = jsonspan.find(BODY, ["tools"])
    out = jsonspan.replace(BODY, span, jsonspan.array_text(['{"name":"b"}']))
    assert out == BODY.replace('[ {"name":"a","x":1.50} , {"name":"b"} ]', '[{"name":"b"}]')
    assert json.loads(out)["tools"] == [{"name": "b"}]


def test_append_and_set_member():
    span = jsonspan.find(BODY, ["messages"])
    out = jsonspan.append_to_array(BODY, span, ['{"role":"user"}', "1"])
    assert json.loads(out)["messages"] == [{"role": "user"}, 1]
    out2 = jsonspan.append_to_array(out, jsonspan.find(out, ["messages"]), ["2"])
    assert json.loads(out2)["messages"] == [{"role": "user"}, 1, 2]
    out3 = jsonspan.set_member(BODY, jsonspan.root(BODY), "new", "[1]")
    assert json.loads(out3)["new"] == [1] and out3.startswith(BODY[:-1])
    out4 = jsonspan.set_member(BODY, jsonspan.root(BODY), "model", '"z"')
    assert json.loads(out4)["model"] == "z"


def test_duplicate_keys_follow_json_semantics():
    text = '{"tools":[1],"tools":[2]}'
    a, b = jsonspan.find(text, ["tools"])
    assert text[a:b] == "[2]"


@pytest.mark.parametrize("text, path", [('{"a":1}', [0]), ('[1,2]', ["a"])])
def test_wrong_container_is_absent(text, path):
    assert jsonspan.find(text, path) is None


def test_elements_of_a_non_array_raise():
    with pytest.raises(ValueError):
        jsonspan.elements('{"a":1}', (0, 7))


@pytest.mark.parametrize("value, text", [
    ({"t": "café ☕ 🚀"}, '{"t":"café ☕ 🚀"}'),  # non-ASCII as the providers send it
    ({"t": "\ud800 é", "\udfff": 1}, '{"t":"\\ud800 é","\\udfff":1}'),  # a lone surrogate escaped, as it came
])
def test_dumps_writes_utf8_ready_json(value, text):
    out = jsonspan.dumps(value)
    assert out == text
    assert json.loads(out.encode("utf-8")) == value


def test_dumps_indented():
    assert jsonspan.dumps({"a": ["\ud800"]}, indent=2) == '{\n  "a": [\n    "\\ud800"\n  ]\n}'


def test_inside_reusing_a_texts_objects_are_decoded_once_and_nothing_is_kept_after(monkeypatch):
    calls = []
    real = jsonspan._members
    monkeypatch.setattr(jsonspan, "_members", lambda text, span: calls.append(span) or real(text, span))
    text = '{"model": "m", "tools": [{"name": "a"}], "messages": []}'
    top = jsonspan.root(text)
    with jsonspan.reusing(text):
        assert jsonspan.find(text, ["tools"], top) == jsonspan.find(text, ["tools"], top)
        assert jsonspan.find(text, ["messages"], top) is not None and len(calls) == 1
        other = text[:-1] + "}"  # equal, but another text: decoded each time
        assert jsonspan.members(other, jsonspan.root(other)) == jsonspan.members(text, top)
        assert len(calls) == 2
    assert jsonspan._memo.text is None  # the body is not kept past the block
    jsonspan.find(text, ["tools"], top)
    assert len(calls) == 3


# --- a root member found from the end --------------------------------------------------------


def walked(text: str, path: list[str | int]) -> tuple[int, int] | None:
    """``find`` walking every member from the start (a span given: no search from the end)."""
    return jsonspan.find(text, path, jsonspan.root(text))


@pytest.mark.parametrize("text", [
    '{"messages": [{"tools": [9]}], "tools": [1], "stream": true}',
    '{"tools": [1], "messages": [{"content": "x", "tools": [9]}]}',  # only nested ones after it
    '{"tools": [1], "meta": {"tools": [9]}}',  # the last literal is nested, in the last member
    '{"tools": [1], "a": [{"tools": [9]}], "b": 2}',
    '{"a": "say \\"tools\\": [9]", "tools": [1]}',  # inside a string the quotes are escaped
    '{"my \\"tools": [9], "tools": [1], "z": {}}',  # a key ending in an escaped quote
    '{"tools": [1], "x": "tools"}',  # a value, not a key
    '{"tools": [9], "tool\\u0073": [1]}',  # the last duplicate, its key written escaped
    '{"tool\\u0073": [9], "tools": [1]}',
    '{"tools":[9],"tools":[1]}',
    ' {\n "tools" :\t[1] ,\n "b" : { } \n}\n ',
    '{"messages": [], "m": "\\\\", "tools": [1]}',  # an escaped backslash before a real quote
])
def test_a_root_member_from_the_end_is_the_one_a_parser_keeps(text):
    span = jsonspan.find(text, ["tools"])
    assert span == walked(text, ["tools"])
    assert json.loads(text[span[0]:span[1]]) == json.loads(text)["tools"] == [1]


@pytest.mark.parametrize("text", ['{"a": {"tools": [1]}}', '{"a": [{"tools": 1}], "b": {"tools": 2}}', "[1]",
                                  '{"tool\\u0073x": 1}'])
def test_a_nested_member_is_not_a_root_member(text):
    assert jsonspan.find(text, ["tools"]) is None


_keys = st.sampled_from(["tools", "messages", "a", 'x"tools', "tools\\", "tool"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["tools", '"tools": [1]', "\\", 'a"b']),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)


@given(members=st.lists(st.tuples(_keys, _json), max_size=5), spaced=st.booleans(), escaped=st.integers(0, 4))
@settings(max_examples=400, deadline=None)
def test_from_the_end_agrees_with_the_walk(members, spaced, escaped):
    sep = ", " if spaced else ","
    text = "{" + sep.join(f"{json.dumps(k)}: {json.dumps(v)}" if spaced else f"{json.dumps(k)}:{json.dumps(v)}"
                          for k, v in members) + "}"
    keys = [i for i in range(len(text)) if text.startswith('"tools":', i)]
    if escaped < len(keys):  # one "tools" key (at any depth) written with an escape
        at = keys[escaped]
        text = text[:at] + '"tool\\u0073"' + text[at + len('"tools"'):]
    for key in ("tools", "messages", "a"):
        assert jsonspan.find(text, [key]) == walked(text, [key])
        assert jsonspan.find(text, [key, 0]) == walked(text, [key, 0])
        span = walked(text, [key])
        if span is None or text[span[0]] != "[":
            with pytest.raises(ValueError) if span is not None else contextlib.nullcontext():
                assert jsonspan.find_elements(text, [key]) is None
        else:
            assert jsonspan.find_elements(text, [key]) == jsonspan.elements(text, span)
        with jsonspan.reusing(text):  # the same, looked up twice
            assert jsonspan.find(text, [key]) == jsonspan.find(text, [key]) == span


def _value_spans(text: str, literal: str = '"tools":') -> dict[int, int]:
    """The span of the value after each ``literal`` in ``text`` (any depth), as ``known`` takes them."""
    spans = {}
    decoder = json.JSONDecoder()
    for i in range(len(text)):
        if text.startswith(literal, i):
            start = i + len(literal)
            while text[start] in " \t\r\n":
                start += 1
            try:
                spans[start] = decoder.raw_decode(text, start)[1]
            except ValueError:  # a literal inside a string
                pass
    return spans


def test_known_values_are_skipped_not_decoded():
    """A value whose span is ``known`` (a catalog parsed before) is neither decoded nor searched:
    here it is not even JSON, and the members around it are found all the same."""
    catalog = '[{"name": "x", "tool_choice": 1, "input": } broken'
    text = '{"tool_choice": "auto", "tools": ' + catalog + ', "input": "hi"}'
    start = text.index(catalog)
    known = {start: start + len(catalog)}
    assert jsonspan.find(text, ["tools"], known=known) == (start, start + len(catalog))
    assert text[slice(*jsonspan.find(text, ["tool_choice"], known=known))] == '"auto"'
    assert text[slice(*jsonspan.find(text, ["input"], known=known))] == '"hi"'
    assert jsonspan.find(text, ["tool_choice"]) is None  # decoded, the broken value hides them
    assert jsonspan.outside(text, '"input"', known) and not jsonspan.outside(text, '"name"', known)


@given(members=st.lists(st.tuples(_keys, _json), max_size=5), spaced=st.booleans())
@settings(max_examples=300, deadline=None)
def test_known_values_change_nothing_found(members, spaced):
    """Skipping the values ``known`` spans (here every ``"tools"`` value, at any depth) finds what
    the walk finds."""
    sep = ", " if spaced else ","
    text = "{" + sep.join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in members) + "}"
    known = _value_spans(text)
    for key in ("tools", "messages", "a"):
        assert jsonspan.find(text, [key], known=known) == walked(text, [key])
        needle = json.dumps(key)
        assert jsonspan.outside(text, needle, known) == any(
            text.startswith(needle, i) and not any(a <= i < b for a, b in known.items()) for i in range(len(text)))


def test_replace_all_splices_every_span_once_and_keeps_the_rest():
    text = '{"a": [1, 2], "b": "x", "c": {}}'
    a, b = text.index("[1, 2]"), text.index('"x"')
    edits = [((a, a + len("[1, 2]")), "[]"), ((b, b + 3), '"yz"')]
    assert jsonspan.replace_all(text, edits) == '{"a": [], "b": "yz", "c": {}}'
    assert jsonspan.replace_all(text, []) is text  # nothing to change: the very text
