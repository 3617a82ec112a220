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
