import json

import pytest

from tooldisco import jsonspan


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
    with jsonspan.reusing(text):
        assert jsonspan.find(text, ["tools"]) == jsonspan.find(text, ["tools"])
        assert jsonspan.find(text, ["messages"]) is not None and len(calls) == 1
        other = text[:-1] + "}"  # equal, but another text: decoded each time
        assert jsonspan.members(other, jsonspan.root(other)) == jsonspan.members(text, jsonspan.root(text))
        assert len(calls) == 2
    assert jsonspan._memo.text is None  # the body is not kept past the block
    jsonspan.find(text, ["tools"])
    assert len(calls) == 3
