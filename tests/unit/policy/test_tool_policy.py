"""The policy's rules: parsing, matching a request to its client entry, globs over a catalog."""

import pytest
from tooldisco.config import ConfigError, parse
from tooldisco.core.tenants import tenant_of
from tooldisco.core.types import Tool, of_tools
from tooldisco.policy.tool_policy import Globs, ToolPolicy


def policy(**p):
    return ToolPolicy(parse({"policy": p}).policy)


def catalog(*names):
    return of_tools(tuple(Tool(n, f'{{"name":"{n}"}}') for n in names))


def test_globs_match_whole_names_case_sensitively():
    g = Globs(("mcp__github__*", "delete_*", "exact"))
    assert g("mcp__github__create_issue") and g("delete_repo") and g("exact")
    assert not g("mcp__gitlab__x") and not g("Delete_repo") and not g("exactly") and not g("x_exact")
    assert not Globs(())("anything") and not Globs(())


def test_the_defaults_apply_to_every_request():
    rules = policy(deny=["mcp__fs__write*"], always_load=["Bash"], max_loaded=7).for_request({}, None)
    tools = catalog("Bash", "mcp__fs__write_file", "mcp__fs__read_file")
    assert rules.denied(tools) == {"mcp__fs__write_file"}
    assert rules.always(tools) == {"Bash"}
    assert rules.max_loaded == 7 and rules.source == "policy"


def test_the_first_matching_client_adds_to_the_defaults():
    p = policy(deny=["rm_*"], max_loaded=20, clients=[
        {"match": {"user_agent": "claude-cli/*"}, "deny": ["mcp__slack__*"], "always_load": ["Read"], "max_loaded": 5},
        {"match": {"header": {"X-Team": "data*"}}, "always_load": ["mcp__pg__*"]},
    ])
    tools = catalog("rm_rf", "mcp__slack__post", "Read", "mcp__pg__query")
    claude = p.for_request({"user-agent": "claude-cli/2.1.3 (external, cli)"}, None)
    assert claude.denied(tools) == {"rm_rf", "mcp__slack__post"}
    assert claude.always(tools) == {"Read"} and claude.max_loaded == 5 and claude.source == "policy.clients[0]"
    data = p.for_request({"x-team": "data-eng"}, None)
    assert data.denied(tools) == {"rm_rf"} and data.always(tools) == {"mcp__pg__query"} and data.max_loaded == 20
    other = p.for_request({"user-agent": "codex_cli_rs/0.1", "x-team": "web"}, None)
    assert other.denied(tools) == {"rm_rf"} and not other.always(tools) and other.source == "policy"


def test_a_client_is_matched_by_its_credentials_fingerprint_never_the_key():
    tenant = tenant_of({"x-api-key": "sk-ant-team-a"}, "")
    p = policy(clients=[{"match": {"key": tenant[:12]}, "deny": ["*"]}])
    tools = catalog("a", "b")
    assert p.for_request({}, tenant).denied(tools) == {"a", "b"}
    assert not p.for_request({}, tenant_of({"x-api-key": "sk-other"}, "")).denied(tools)
    assert not p.for_request({}, None).denied(tools)
    with pytest.raises(ConfigError) as e:
        parse({"policy": {"clients": [{"match": {"key": "sk-ant-api03-secret"}}]}})
    assert "secret" not in str(e.value)  # a pasted key is refused without being repeated


def test_every_condition_of_a_match_must_hold():
    p = policy(clients=[{"match": {"user_agent": "codex*", "header": {"x-env": "prod"}}, "deny": ["x"]}])
    tools = catalog("x")
    assert p.for_request({"user-agent": "codex_cli_rs/1", "x-env": "prod"}, None).denied(tools)
    assert not p.for_request({"user-agent": "codex_cli_rs/1", "x-env": "dev"}, None).denied(tools)
    assert not p.for_request({"x-env": "prod"}, None).denied(tools)


def test_what_a_rule_set_decides_is_kept_on_the_catalog():
    rules = policy(deny=[f"tool_{i}_*" for i in range(50)]).for_request({}, None)
    tools = catalog(*[f"tool_{i}_x" for i in range(500)])
    first = rules.denied(tools)
    assert len(first) == 50 and rules.denied(tools) is first  # the second request pays a lookup


@pytest.mark.parametrize("bad, key", [
    ({"deny": "x", "max_loaded": 0}, "policy.max_loaded"),
    ({"clients": [{"deny": ["x"]}]}, "policy.clients[0].match.user_agent"),
    ({"clients": [{"match": {"header": {"a": "1", "b": "2"}}}]}, "policy.clients[0].match.header"),
    ({"clients": [{"match": {"user_agent": "x"}, "dney": ["x"]}]}, "policy.clients[0].dney"),
    ({"on_change": "block"}, "policy.on_change"),
    ({"pin": "never"}, "policy.pin"),
    ({"approve": ["just_a_name"]}, "policy.approve"),
    ({"denny": ["x"]}, "policy.denny"),
])
def test_a_bad_policy_names_its_key(bad, key):
    with pytest.raises(ConfigError) as e:
        parse({"policy": bad})
    assert str(e.value).startswith(key)


def test_the_defaults_warn_and_pin_on_first_use():
    s = parse({}).policy
    assert (s.pin, s.on_change, s.on_screen, s.screen, s.rules) == ("trust", "warn", "warn", True, False)
    assert parse({"policy": {"deny": "one"}}).policy.deny == ("one",)
