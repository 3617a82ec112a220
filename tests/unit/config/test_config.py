from pathlib import Path

import pytest

from tooldisco.config import Config, ConfigError, load_config as load, parse, parse_duration

ROOT = Path(__file__).resolve().parents[3]


def td(**fields):
    return {"pipes": {"tool_discovery": fields}}


def test_defaults():
    cfg = parse({})
    t = cfg.tool_discovery
    assert (t.enabled, t.strategy, t.search_tool_name, t.max_search_results) == (
        False, "passthrough", "gateway_search_tools", 5)
    assert cfg.sessions.ttl == 3600 and cfg.sessions.cleanup_interval == 300
    assert cfg.handles_host("api.anthropic.com")
    assert cfg.handles_host("bedrock-runtime.us-east-1.amazonaws.com")
    assert not cfg.handles_host("example.com")


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")))
def test_shipped_configs_load(path):
    assert isinstance(load(path, env={}), Config)


@pytest.mark.parametrize(
    "data, message",
    [
        (td(max_tools="many"), r"pipes.tool_discovery.max_tools: expected a whole number"),
        (td(min_tools=-1), r"pipes.tool_discovery.min_tools: must be at least 0"),
        (td(min_tools=10, max_tools=5), r"pipes.tool_discovery.max_tools: must be at least min_tools"),
        (td(target_ratio=1.5), r"pipes.tool_discovery.target_ratio: must be at most 1.0"),
        (td(target_ratio="x"), r"pipes.tool_discovery.target_ratio: expected a number"),
        (td(enabled="maybe"), r"pipes.tool_discovery.enabled: expected true or false"),
        (td(search_tool_name="bad name!"), r"pipes.tool_discovery.search_tool_name: must match"),
        (td(max_search_results=0), r"pipes.tool_discovery.max_search_results: must be at least 1"),
        (td(always_keep=[1]), r"pipes.tool_discovery.always_keep: expected a list"),
        (td(api={"timeout": "soon"}), r"pipes.tool_discovery.api.timeout: expected a duration"),
        (td(api={"timeout": "0s"}), r"pipes.tool_discovery.api.timeout: must be greater than zero"),
        (td(api={"endpoint": "ftp://x"}), r"pipes.tool_discovery.api.endpoint: must be an http"),
        (td(api={"rollout": "sometimes"}), r"pipes.tool_discovery.api.rollout: must be one of"),
        (td(search={"backend": "magic"}), r"pipes.tool_discovery.search.backend: must be one of"),
        (td(scorer="vibes"), r"pipes.tool_discovery.scorer: must be one of"),
        (td(max_tool=3), r"pipes.tool_discovery.max_tool: unknown key"),
        ({"sessions": {"ttl": "forever"}}, r"sessions.ttl: expected a duration"),
        ({"hosts": "*.example.com"} | {"telemetry": {"path": 3}}, r"telemetry.path: expected a string"),
        ({"websocket": "maybe"}, r"websocket: must be one of"),
        ({"max_body_bytes": 1000}, r"max_body_bytes: must be at least 65536"),
        ({"max_body_bytes": "lots"}, r"max_body_bytes: expected a whole number"),
        ({"bogus": 1}, r"bogus: unknown key"),
        ({"pipes": []}, r"pipes: expected a mapping"),
        (td(api={"api_key": "${NOPE_NOT_SET}"}), r"api.api_key: environment variable NOPE_NOT_SET is not set"),
    ],
)
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        parse(data, env={})


def test_an_unknown_strategy_is_refused_with_the_nearest_name():
    with pytest.raises(ConfigError, match=r"strategy: unknown strategy 'toolsearch' \(did you mean 'tool-search'\?\)"):
        parse(td(strategy="toolsearch"))
    with pytest.raises(ConfigError, match=r"unknown strategy 'telepathy'; one of passthrough"):
        parse(td(strategy="telepathy"))


def test_a_misspelled_key_is_refused_with_the_nearest_name():
    with pytest.raises(ConfigError, match=r"max_tool: unknown key \(did you mean 'max_tools'\?\)"):
        parse(td(max_tool=3))
    with pytest.raises(ConfigError, match=r"tool_discovery.enabeld: unknown key \(did you mean 'enabled'\?\)"):
        parse(td(enabeld=True))


@pytest.mark.parametrize("strategy, forced", [("relevance", False), ("tool-search", True), ("api", True)])
def test_search_fallback_forced(strategy, forced):
    cfg = parse(td(strategy=strategy, enable_search_fallback=not forced))
    assert cfg.tool_discovery.enable_search_fallback is forced
    assert any("forced" in w for w in cfg.warnings)


def test_env_expansion_and_default():
    cfg = parse(td(api={"api_key": "${KEY}", "endpoint": "${EP:-http://x/y}"}), env={"KEY": "s3cret"})
    assert cfg.tool_discovery.api.api_key == "s3cret"
    assert cfg.tool_discovery.api.endpoint == "http://x/y"
    assert "s3cret" not in repr(cfg)


@pytest.mark.parametrize("value, seconds", [("2s", 2), ("500ms", 0.5), ("5m", 300), ("1h", 3600), (3, 3), ("1.5s", 1.5)])
def test_durations(value, seconds):
    assert parse_duration(value, "k") == seconds


def test_always_keep_globs():
    t = parse(td(always_keep=["read_file", "mcp__github__*"])).tool_discovery
    assert t.keeps("read_file") and t.keeps("mcp__github__create_issue") and not t.keeps("mcp__slack__post")


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipes: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load(bad)


def test_other_pipes_are_ignored():
    cfg = parse({"pipes": {"tool_output": {"enabled": True}, "tool_discovery": {"enabled": True}}})
    assert cfg.tool_discovery.enabled


def test_max_body_bytes():
    assert parse({}).max_body_bytes == 32 * 1024 * 1024  # Anthropic's request limit, the largest of the APIs
    assert parse({"max_body_bytes": 1 << 20}).max_body_bytes == 1 << 20


def test_host_presets_expand_beside_host_names():
    cfg = parse({"hosts": ["default", "openrouter", "ollama", "gw.example.com."]})
    for host in ("api.anthropic.com", "bedrock-runtime.eu-west-1.amazonaws.com", "openrouter.ai",
                 "localhost", "127.0.0.1", "::1", "gw.example.com"):
        assert cfg.handles_host(host), host
    assert not cfg.handles_host("api.groq.com")
    assert cfg.hosts.count("localhost") == 1  # aliases of one preset add it once


def test_host_presets_keep_glob_matching():
    cfg = parse({"hosts": ["azure"]})
    assert cfg.handles_host("my-res.openai.azure.com")
    assert cfg.handles_host("x.services.ai.azure.com")
    assert not cfg.handles_host("openai.azure.com.evil.example")


def test_unknown_preset_names_the_nearest():
    with pytest.raises(ConfigError, match=r"hosts: unknown preset 'openroutr'; did you mean 'openrouter'\?"):
        parse({"hosts": ["default", "openroutr"]})
    # a bare word is a preset, never a host: a dotless host name takes a trailing dot
    with pytest.raises(ConfigError, match=r"did you mean 'ollama'\?.*: olama\.\)"):
        parse({"hosts": ["olama"]})
    assert parse({"hosts": ["my-ollama."]}).handles_host("my-ollama")
    assert parse({"hosts": ["localhost"]}).handles_host("127.0.0.1")  # an alias of local


def test_default_preset_is_the_shipped_list():
    shipped = load(ROOT / "configs" / "tool_discovery.yaml", env={})
    assert parse({"hosts": ["default"]}).hosts == shipped.hosts == parse({}).hosts
