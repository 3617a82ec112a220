"""Gemini's ``?key=`` moves into ``x-goog-api-key`` (glue.gemini_key)."""

from mitmproxy.test import taddons, tflow, tutils

from tests.unit.glue.chain import Chain, tool_search_config

PATH = "/v1beta/models/gemini-2.5-flash:generateContent"


def gemini_flow(query: str, headers=()):
    req = tutils.treq(host="generativelanguage.googleapis.com", port=443, scheme=b"https",
                      path=f"{PATH}{query}".encode(), method=b"POST",
                      headers=[(b"content-type", b"application/json"), *headers], content=b"{}")
    return tflow.tflow(req=req)


def test_the_key_moves_from_the_url_to_the_header(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = gemini_flow("?key=AIzaSECRET&alt=sse")
        chain.requestheaders(f)
        assert f.request.headers["x-goog-api-key"] == "AIzaSECRET"
        assert "key" not in f.request.query and f.request.query["alt"] == "sse"
        assert "AIza" not in f.request.url


def test_a_request_naming_its_key_twice_or_no_gemini_host_is_left_alone(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        both = gemini_flow("?key=AIzaONE", [(b"x-goog-api-key", b"AIzaTWO")])
        chain.requestheaders(both)
        assert both.request.query["key"] == "AIzaONE" and both.request.headers["x-goog-api-key"] == "AIzaTWO"
        twice = gemini_flow("?key=a&key=b")
        chain.requestheaders(twice)
        assert twice.request.query.get_all("key") == ["a", "b"] and "x-goog-api-key" not in twice.request.headers
        other = tflow.tflow(req=tutils.treq(host="example.com", path=b"/x?key=k"))
        chain.requestheaders(other)
        assert other.request.query["key"] == "k"
