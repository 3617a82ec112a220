"""The ``tooldisco`` console script: its arguments, each agent's environment lines, doctor's
checks, and the paths it hands to mitmproxy."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from tooldisco import cli
from tooldisco.config import load_config

from tests.unit.test_doctor import make_ca, pem

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_config_of_ones_own(tmp_path, monkeypatch):
    """Each test finds the shipped default unless it says otherwise (no user file, no variable),
    and `run` does not look for a free port (the test machine's 8080 is not the test's)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for var in ("TOOLDISCO_CONFIG", "CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cli, "_listen_problem", lambda cmd, web: None)


def test_help_lists_every_subcommand(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for command in ("init", "run", "addon-path", "env", "wrap", "demo", "doctor", "report", "forget", "tools"):
        assert f"    {command} " in out


def test_a_command_is_required(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2


def test_addon_path_is_the_packages_script_and_it_loads(capsys) -> None:
    assert cli.main(["addon-path"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == ROOT / "addon" / "tooldisco" / "script" / "tool_discovery.py"
    assert path.is_file()
    # Its own directory holds no module that could shadow another while mitmproxy loads it.
    assert sorted(p.name for p in path.parent.glob("*.py")) == ["__init__.py", "tool_discovery.py"]


def test_default_config_is_inside_the_package_and_loads() -> None:
    assert cli.DEFAULT_CONFIG.is_relative_to(ROOT / "addon" / "tooldisco")
    load_config(cli.DEFAULT_CONFIG)
    # The checkout's configs/ is the package's (scripts and docs name configs/...).
    assert (ROOT / "configs" / "tool_discovery.yaml").resolve() == cli.DEFAULT_CONFIG.resolve()


@pytest.mark.parametrize(("agent", "var"), [
    ("claude-code", "NODE_EXTRA_CA_CERTS"), ("claude", "NODE_EXTRA_CA_CERTS"), ("gemini-cli", "NODE_EXTRA_CA_CERTS"),
    ("opencode", "NODE_EXTRA_CA_CERTS"), ("qwen-code", "NODE_EXTRA_CA_CERTS"), ("cline", "NODE_EXTRA_CA_CERTS"),
    ("copilot", "NODE_EXTRA_CA_CERTS"), ("pi", "NODE_EXTRA_CA_CERTS"), ("codex", "CODEX_CA_CERTIFICATE"),
    ("python", "SSL_CERT_FILE"), ("openai-agents", "SSL_CERT_FILE"), ("boto3", "AWS_CA_BUNDLE"),
])
def test_env_lines_name_the_ca_variable_each_agent_reads(agent, var, capsys, tmp_path) -> None:
    assert cli.main(["env", agent, "--proxy", "http://127.0.0.1:9000", "--confdir", str(tmp_path)]) == 0
    exports = [line for line in capsys.readouterr().out.splitlines() if line.startswith("export ")]
    assert exports[0] == "export HTTPS_PROXY=http://127.0.0.1:9000"
    assert exports[1] == f"export {var}={tmp_path / 'mitmproxy-ca-cert.pem'}"


def test_env_lines_evaluate_in_a_shell(tmp_path) -> None:
    script = "\n".join(cli.env_lines("qwen-code", confdir=tmp_path)) + "\necho $HTTPS_PROXY $NODE_EXTRA_CA_CERTS $OPENAI_BASE_URL"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["http://127.0.0.1:8080", str(tmp_path / "mitmproxy-ca-cert.pem"), "https://api.openai.com/v1"]


def test_unknown_agent_names_the_known_ones() -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["env", "nosuch"])
    assert "claude-code" in str(e.value) and "boto3" in str(e.value)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_needed_extras_follow_the_config(tmp_path) -> None:
    assert cli.needed_extras(cli.DEFAULT_CONFIG) == []  # BM25: no extra
    hybrid = _write(tmp_path / "h.yaml", "pipes:\n  tool_discovery:\n    search:\n      backend: hybrid\n")
    assert cli.needed_extras(hybrid) == ["semantic"]
    scorer = _write(tmp_path / "s.yaml", "pipes:\n  tool_discovery:\n    scorer: ${SCORER:-hybrid}\n")
    assert cli.needed_extras(scorer) == ["semantic"]
    redis = _write(tmp_path / "r.yaml", "sessions:\n  backend: redis\n")
    assert cli.needed_extras(redis) == ["redis"]


def test_doctor_reports_each_check(tmp_path) -> None:
    ca = tmp_path / "mitmproxy-ca-cert.pem"
    ca.write_bytes(pem(make_ca()))
    lines, problems = cli.doctor(str(cli.DEFAULT_CONFIG), tmp_path,
                                 {"NODE_EXTRA_CA_CERTS": str(ca), "CODEX_CA_CERTIFICATE": str(tmp_path / "gone.pem")})
    text = "\n".join(lines)
    assert problems == 1, text  # the CA variable naming a missing file
    assert f"ok    CA file {ca}" in text
    assert f"ok    NODE_EXTRA_CA_CERTS={ca} holds mitmproxy's CA" in text
    assert "FAIL  CODEX_CA_CERTIFICATE=" in text and "(no such file)" in text
    assert f"      fix: export CODEX_CA_CERTIFICATE={ca}" in text
    assert "ok    config" in text and "ok    hosts cover api.anthropic.com" in text


def test_doctor_flags_a_missing_ca_uncovered_hosts_and_a_bad_config(tmp_path) -> None:
    narrow = _write(tmp_path / "n.yaml", "pipes:\n  tool_discovery:\n    enabled: true\n    strategy: relevance\n"
                                         "hosts: [api.anthropic.com]\n")
    lines, problems = cli.doctor(str(narrow), tmp_path, {})
    text = "\n".join(lines)
    assert problems == 2, text
    assert "FAIL  CA file" in text and "tooldisco run" in text
    assert "not: api.openai.com" in text
    assert "no agent CA variable is set" in text
    bad = _write(tmp_path / "b.yaml", "pipes:\n  tool_discovery:\n    enabled: true\n    strategy: nosuch\n")
    lines, problems = cli.doctor(str(bad), tmp_path, {})
    assert any(line.startswith("FAIL  config") and "strategy" in line for line in lines), lines
    broken = _write(tmp_path / "x.yaml", "hosts: [\n")
    lines, problems = cli.doctor(str(broken), tmp_path, {})
    assert any(line.startswith(f"FAIL  config {broken}") for line in lines), lines


def test_doctor_names_the_extra_to_install(tmp_path, monkeypatch) -> None:
    (tmp_path / "mitmproxy-ca-cert.pem").write_bytes(pem(make_ca()))
    hybrid = _write(tmp_path / "h.yaml", "pipes:\n  tool_discovery:\n    enabled: true\n    strategy: tool-search\n"
                                         "    search:\n      backend: hybrid\n")
    monkeypatch.setattr(cli, "missing", lambda extra: ["onnxruntime"])
    lines, problems = cli.doctor(str(hybrid), tmp_path, {})
    assert problems == 1
    assert any("pip install 'tooldisco[semantic]'" in line for line in lines)


def test_run_command_is_loopback_unless_told(monkeypatch) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    cmd = cli.run_command("c.yaml", False, ["-p", "9000"])
    assert cmd[:5] == ["/bin/mitmdump", "-s", str(cli.ADDON), "--set", "tool_discovery_config=c.yaml"]
    assert cmd[5:] == ["--listen-host", "127.0.0.1", "-p", "9000"]
    cmd = cli.run_command("c.yaml", False, ["--listen-host=0.0.0.0"])
    assert "127.0.0.1" not in cmd
    web = cli.run_command("c.yaml", True, [])
    assert web[0] == "/bin/mitmweb"
    assert "web_columns=comment" in web
    assert "web_open_browser=false" in web and cli._value(web, "--web-host") == "127.0.0.1"


def test_run_refuses_a_config_whose_extra_is_missing(tmp_path, monkeypatch, capsys) -> None:
    hybrid = _write(tmp_path / "h.yaml", "pipes:\n  tool_discovery:\n    search:\n      backend: hybrid\n")
    monkeypatch.setattr(cli, "missing", lambda extra: ["onnxruntime"])
    monkeypatch.setattr(cli.os, "execv", lambda *a: pytest.fail("started mitmdump"))
    assert cli.main(["run", "--config", str(hybrid)]) == 1
    assert "pip install 'tooldisco[semantic]'" in capsys.readouterr().err


def test_report_without_its_extra_is_one_line(monkeypatch, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert cli.main(["report", "x.jsonl"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "matplotlib" in err and "pip install 'tooldisco[report]'" in err


def test_report_selector_needs_no_extra(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: pytest.fail(f"looked for {name}"))
    log = tmp_path / "t.jsonl"
    log.write_text("")
    assert cli.main(["report", "--selector", str(log)]) == 0
    assert "No api-strategy records found." in capsys.readouterr().out


def test_the_console_script_runs_as_a_module() -> None:
    out = subprocess.run([sys.executable, "-m", "tooldisco.cli", "addon-path"], capture_output=True, text=True,
                         cwd=ROOT / "addon", check=True).stdout.strip()
    assert out.endswith("tool_discovery.py")


def test_run_passes_every_other_argument_to_mitmdump(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    ran: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, cmd: ran.append(cmd))
    assert cli.main(["run", "--mode", "reverse:https://api.anthropic.com", "-p", "9000", "--set", "confdir=/c"]) == 0
    [cmd] = ran
    assert cmd[-6:] == ["--mode", "reverse:https://api.anthropic.com", "-p", "9000", "--set", "confdir=/c"]
    assert f"tool_discovery_config={cli.DEFAULT_CONFIG}" in cmd
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9000" in err and "--confdir /c" in err


def test_run_with_web_gives_mitmweb_a_hash_and_prints_the_token(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    ran: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, cmd: ran.append(cmd))
    assert cli.main(["run", "--web", "--web-port", "9001"]) == 0
    [cmd] = ran
    assert cmd[0] == "/bin/mitmweb"
    token = capsys.readouterr().err.split("?token=")[1].split()[0]
    password = next(a for a in cmd if a.startswith("web_password=")).split("=", 1)[1]
    assert token not in " ".join(cmd) and password.startswith("$argon2")


def test_wrap_takes_its_options_before_the_dash_dash_and_the_command_after(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(cli, "_wrap", lambda ns: seen.append(ns) or 0)
    assert cli.main(["wrap", "claude", "--config", "x.yaml", "--", "claude", "--config", "y", "-p", "hi"]) == 0
    assert seen[0].agent == "claude" and seen[0].config == "x.yaml"
    assert seen[0].command_args == ["claude", "--config", "y", "-p", "hi"]


def test_wrap_without_a_command_says_how(capsys) -> None:
    assert cli.main(["wrap", "claude"]) == 2
    assert "tooldisco wrap AGENT -- COMMAND" in capsys.readouterr().err


def test_summary_of_a_run() -> None:
    assert "no request was processed" in cli.summary([])[0]
    lines = cli.summary([
        {"tool_tokens_before": 1000, "tool_tokens_after": 100,
         "searches": [{"query": "weather", "matched": ["get_forecast"]}]},
        {"tool_tokens_before": 1000, "tool_tokens_after": 1000, "fallback_reason": "unsupported"},
    ])
    assert lines[0] == ("tooldisco: 2 requests processed; tool definitions ~2000 tokens sent by the agent, "
                        "~1100 in the model's prompt (45% fewer)")
    native = cli.summary([{"tool_tokens_before": 1000, "tool_tokens_after": 100, "tool_tokens_wire": 1100}])
    assert native[0].endswith("~100 in the model's prompt (90% fewer), ~1100 on the wire")
    assert "1 searches" in lines[1] and "1 requests passed through unchanged" in lines[1]
    assert lines[2] == "  search 'weather': get_forecast"


def test_report_runs_the_checkouts_report_over_a_telemetry_file(tmp_path) -> None:
    telemetry = _write(tmp_path / "t.jsonl", '{"provider": "anthropic", "strategy": "tool-search", "time": 1780000000,'
                       ' "total_tools": 40, "kept_tools": 5, "tool_tokens_before": 4000, "tool_tokens_after": 500}\n')
    assert cli.main(["report", str(telemetry), "-o", str(tmp_path / "r.html"), "--quiet"]) == 0
    assert "<html" in (tmp_path / "r.html").read_text().lower()


def test_forget_takes_the_key_from_the_environment_or_stdin_never_argv(tmp_path, monkeypatch, capsys) -> None:
    from tooldisco.core.tenants import tenant_of
    from tooldisco.state.disk import DiskSessionStore

    config = _write(tmp_path / "c.yaml", f"sessions:\n  dir: {tmp_path / 's'}\n")
    store = DiskSessionStore(tmp_path / "s")
    for key in ("sk-a", "sk-b"):
        store.learn(tenant_of({"authorization": f"Bearer {key}"}, ""), lambda _: {"v": 1})
    monkeypatch.setenv("MY_KEY", "sk-a")
    assert cli.main(["forget", "--config", str(config), "--key-env", "MY_KEY"]) == 0
    assert "forgot what that tenant taught" in capsys.readouterr().out
    assert store.learned(tenant_of({"x-api-key": "sk-a"}, "")) is None
    assert store.learned(tenant_of({"x-api-key": "sk-b"}, "")) is not None
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-b\n"))
    assert cli.main(["forget", "--config", str(config)]) == 0
    assert store.learned(tenant_of({"x-api-key": "sk-b"}, "")) is None
    monkeypatch.delenv("MY_KEY")
    assert cli.main(["forget", "--config", str(config), "--key-env", "MY_KEY"]) == 1
    with pytest.raises(SystemExit):
        cli.main(["forget", "sk-a"])  # a key on the command line is refused


@pytest.mark.parametrize("argv, listen, rest", [
    (["--metrics"], "127.0.0.1:0", []),
    (["--metrics", "-p", "9000"], "127.0.0.1:0", ["-p", "9000"]),
    (["--metrics", "9464", "-p", "9000"], "127.0.0.1:9464", ["-p", "9000"]),
    (["-p", "9000", "--metrics=0.0.0.0:9100"], "0.0.0.0:9100", ["-p", "9000"]),
    (["--metrics", "[::1]:9464"], "[::1]:9464", []),
])
def test_run_with_metrics_sets_the_addons_option(monkeypatch, capsys, argv, listen, rest) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    ran: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, cmd: ran.append(cmd))
    assert cli.main(["run", *argv]) == 0
    [cmd] = ran
    assert cmd[5:7] == ["--set", f"tool_discovery_metrics={listen}"]
    assert cmd[7:] == ["--listen-host", "127.0.0.1", *rest]
    assert f"Metrics: Prometheus on {listen}" in capsys.readouterr().err


def test_run_without_metrics_sets_no_option(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    ran: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, cmd: ran.append(cmd))
    assert cli.main(["run"]) == 0
    assert not any("tool_discovery_metrics" in a for a in ran[0])
    assert "Metrics:" not in capsys.readouterr().err


@pytest.mark.parametrize("addr", [":9464", "localhost", "~d example.com"])
def test_run_refuses_a_metrics_address_without_a_host_or_port(monkeypatch, capsys, addr) -> None:
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    monkeypatch.setattr(cli.os, "execv", lambda *a: pytest.fail("started mitmdump"))
    assert cli.main(["run", "--metrics", addr]) == 2
    assert capsys.readouterr().err.startswith("tooldisco: --metrics: ")


def test_report_help_is_complete(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["report", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tooldisco report ")
    for option in ("--selector", "--json", "--since", "--until", "--session", "--tenant", "--agent", "--api",
                   "--strategy", "--id", "--turns", "--usd-per-mtok", "--quiet", "-o"):
        assert f" {option}" in out, option
    assert "README" not in out


def test_wrap_takes_a_timeout(monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(cli, "_wrap", lambda ns: seen.append(ns) or 0)
    assert cli.main(["wrap", "claude", "--", "claude"]) == 0
    assert cli.main(["wrap", "claude", "--timeout", "0", "--", "claude"]) == 0
    assert [ns.timeout for ns in seen] == [cli.WRAP_TIMEOUT, 0.0] and cli.WRAP_TIMEOUT == 120


def test_forget_on_a_store_it_cannot_use_says_so_in_one_line(tmp_path, capsys) -> None:
    (tmp_path / "a-file").write_text("")
    config = _write(tmp_path / "c.yaml", f"sessions:\n  dir: {tmp_path / 'a-file' / 's'}\n")
    assert cli.main(["forget", "--config", str(config), "--all"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "cannot be used" in err and "nothing was forgotten" in err and str(tmp_path / "a-file" / "s") in err
