"""The option ``tool_discovery_config``, parsed once into the engine (glue.options)."""

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from tests.unit.glue.chain import Chain, relevance_config, tool_discovery, write


def test_bad_config_is_an_options_error_naming_the_key(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        with pytest.raises(exceptions.OptionsError, match=r"pipes.tool_discovery.max_tools: expected a whole number"):
            tctx.configure(chain.options,
                           tool_discovery_config=write(tmp_path, "pipes: {tool_discovery: {max_tools: lots}}"))


def test_default_config_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_discovery.DEFAULT_CONFIG)
        assert chain.engine is not None and chain.engine.config.tool_discovery.enabled


async def test_a_new_config_replaces_the_engine(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        first = chain.engine
        (tmp_path / "b").mkdir()
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path / "b"))
        assert chain.engine is not first and chain.engine.config.tool_discovery.strategy == "relevance"


def test_the_startup_line_says_what_runs_and_names_no_credential():
    from tooldisco.config import parse
    from tooldisco.glue.options import startup

    secret = "s3cretPassw0rd"
    config = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "api", "defer": {"call_through": []},
                                                 "native": {"responses": []},
                                                 "api": {"endpoint": f"https://u:{secret}@selector.example:8443/v1",
                                                         "api_key": secret}}},
                    "hosts": ["default"], "sessions": {"backend": "redis", "redis": {"url": f"redis://:{secret}@cache:6380/2"}},
                    "telemetry": {"enabled": False}})
    line = startup(config, "/etc/td.yaml")
    assert line == ("tool discovery: on · config /etc/td.yaml · strategy api · deferral native on anthropic, bedrock for "
                    "the models in tool_discovery.native; classic otherwise · search api at selector.example:8443 · "
                    "hosts api.anthropic.com, api.openai.com, generativelanguage.googleapis.com, "
                    "bedrock-runtime.*.amazonaws.com · sessions redis at cache:6380 · telemetry off")
    assert secret not in line
    plain = startup(parse({"pipes": {"tool_discovery": {"strategy": "relevance"}}}), "c.yaml")
    assert plain.startswith("tool discovery: off (set pipes.tool_discovery.enabled: true) · config c.yaml · "
                            "strategy relevance · hosts ") and "deferral" not in plain
