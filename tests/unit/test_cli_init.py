"""A config of one's own: ``tooldisco init`` writes it, every command finds config the same way
(--config, $TOOLDISCO_CONFIG, the older $CONFIG, the user's file, the shipped default) and says
which one it used, shipped configs go by name, and a config error is a few lines (what, where,
the fix) before any banner, never a traceback."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mitmproxy.test import taddons
from tooldisco import cli, userconfig
from tooldisco.config import load_config, parse, parse_duration

from tests.unit.glue.chain import Chain, flow

ROOT = Path(__file__).resolve().parents[2]
LISTEN_PROBLEM = cli._listen_problem  # the real one: the fixture stubs it


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home of one's own, no config variable set, and `run` stopped before mitmdump."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "TOOLDISCO_CONFIG", "CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cli, "_tool", lambda name: f"/bin/{name}")
    monkeypatch.setattr(cli, "_listen_problem", lambda cmd, web: None)
    return home


def ran(monkeypatch) -> list[list[str]]:
    """The command lines `run` would exec."""
    cmds: list[list[str]] = []
    monkeypatch.setattr(cli.os, "execv", lambda path, cmd: cmds.append(cmd))
    return cmds


def option(cmd: list[str]) -> str:
    return next(a for a in cmd if a.startswith("tool_discovery_config=")).split("=", 1)[1]


def test_init_writes_a_complete_private_config_where_every_command_looks(home, capsys) -> None:
    assert cli.main(["init"]) == 0
    out, err = capsys.readouterr()
    path = home / ".config" / "tooldisco" / "config.yaml"
    assert out == f"{path}\n"  # the path alone on stdout: $(tooldisco init) gives it
    assert "every tooldisco command now uses it" in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert text.startswith("# tooldisco: a config of your own, written by `tooldisco init`")
    # Complete: the shipped default's every value, so it is never silently off.
    assert load_config(path) == load_config(userconfig.SHIPPED_DEFAULT)
    assert load_config(path).tool_discovery.enabled
    assert "scripts/" not in text and "site-packages" not in text


def test_init_honours_xdg_config_home(home, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert cli.main(["init"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "xdg" / "tooldisco" / "config.yaml")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, as the XDG spec says
    assert userconfig.user_config() == home / ".config" / "tooldisco" / "config.yaml"


def test_init_keeps_an_existing_file_unless_forced(home, capsys) -> None:
    path = home / ".config" / "tooldisco" / "config.yaml"
    assert cli.main(["init"]) == 0
    path.write_text("hosts: [default]\n")
    capsys.readouterr()
    assert cli.main(["init"]) == 1
    err = capsys.readouterr().err
    assert path.read_text() == "hosts: [default]\n"
    assert err.splitlines() == ["tooldisco init: ~/.config/tooldisco/config.yaml exists; it is kept as it is",
                                "  fix: edit it, or write it anew (the old one is lost): tooldisco init --force"]
    assert cli.main(["init", "--force"]) == 0
    assert path.read_text().startswith("# tooldisco: a config of your own")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_init_elsewhere_and_from_another_shipped_config(home, tmp_path, capsys) -> None:
    target = tmp_path / "mine" / "relevance.yaml"
    assert cli.main(["init", str(target), "--from", "relevance"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(target)
    assert f"--config {target}" in err and "TOOLDISCO_CONFIG=" in err  # not where tooldisco looks: how to use it
    assert load_config(target).tool_discovery.strategy == "relevance"
    assert cli.main(["init", str(tmp_path / "x.yaml"), "--from", "nosuch"]) == 2
    assert "no shipped config named nosuch" in capsys.readouterr().err


def test_run_uses_the_file_init_wrote_and_says_so(home, monkeypatch, capsys) -> None:
    cmds = ran(monkeypatch)
    assert cli.main(["init"]) == 0
    capsys.readouterr()
    assert cli.main(["run"]) == 0
    [cmd] = cmds
    assert option(cmd) == str(home / ".config" / "tooldisco" / "config.yaml")
    err = capsys.readouterr().err.splitlines()
    # The line comes first, before the banner.
    assert err[0] == "tooldisco: config ~/.config/tooldisco/config.yaml (your own; `tooldisco init` wrote it)"
    assert err[1].startswith("tool discovery proxy on http://127.0.0.1:8080")


def test_every_command_finds_the_config_the_same_way(home, tmp_path, monkeypatch, capsys) -> None:
    own = home / ".config" / "tooldisco" / "config.yaml"
    env_file, old_file, flag_file = (tmp_path / f"{n}.yaml" for n in ("env", "old", "flag"))
    for f in (env_file, old_file, flag_file):
        f.write_text(f"sessions:\n  dir: {tmp_path / 's'}\n")
    cmds = ran(monkeypatch)

    def used(*argv: str) -> tuple[str, str]:
        capsys.readouterr()
        assert cli.main(["run", *argv]) == 0
        return option(cmds.pop()), capsys.readouterr().err.splitlines()[0]

    assert used() == (str(userconfig.SHIPPED_DEFAULT), f"tooldisco: config {userconfig.SHIPPED_DEFAULT} "
                      "(the shipped default; `tooldisco init` writes one of your own)")
    assert cli.main(["init"]) == 0
    assert used()[0] == str(own)
    monkeypatch.setenv("CONFIG", str(old_file))
    assert used() == (str(old_file), f"tooldisco: config {old_file} (from $CONFIG, the older name of $TOOLDISCO_CONFIG)")
    monkeypatch.setenv("TOOLDISCO_CONFIG", str(env_file))
    assert used() == (str(env_file), f"tooldisco: config {env_file} (from $TOOLDISCO_CONFIG)")
    assert used("--config", str(flag_file))[0] == str(flag_file)
    assert used("--config", "relevance") == (str(userconfig.SHIPPED_DIR / "relevance.yaml"),
                                             f"tooldisco: config {userconfig.SHIPPED_DIR / 'relevance.yaml'} "
                                             "(shipped config 'relevance', from --config)")
    monkeypatch.setenv("TOOLDISCO_CONFIG", "tool-search.yaml")  # a shipped name in the variable too
    assert used()[0] == str(userconfig.SHIPPED_DIR / "tool-search.yaml")
    # doctor, forget and wrap read the same one.
    monkeypatch.setenv("TOOLDISCO_CONFIG", str(env_file))
    seen = []
    monkeypatch.setattr(cli, "doctor", lambda config, confdir, environ, why="": seen.append(Path(config)) or ([], 0))
    monkeypatch.setattr(cli, "forget", lambda config, key: seen.append(Path(config)) or ("done", 0))
    assert cli.main(["doctor"]) == 0 and cli.main(["forget", "--all"]) == 0
    assert seen == [env_file, env_file]


@pytest.mark.parametrize("name", ["relevance", "relevance.yaml", "tool-search", "api", "passthrough", "tool_discovery"])
def test_shipped_configs_go_by_name(home, name) -> None:
    found = userconfig.find(name, {})
    assert found.path == userconfig.SHIPPED_DIR / (name.removesuffix(".yaml") + ".yaml")
    load_config(found.path)


def test_a_file_of_that_name_wins_over_a_shipped_name(home, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "relevance.yaml").write_text("hosts: [default]\n")
    assert userconfig.find("relevance.yaml", {}).path == Path("relevance.yaml")


def _cli(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TOOLDISCO_CONFIG", "CONFIG", "XDG_CONFIG_HOME")}
    return subprocess.run([sys.executable, "-m", "tooldisco.cli", *argv], capture_output=True, text=True, timeout=60,
                          cwd=home, check=False, env={**clean, "HOME": str(home), "PYTHONPATH": str(ROOT / "addon"), **env})


def few_lines_no_traceback(done: subprocess.CompletedProcess[str]) -> list[str]:
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) <= 5, text
    assert "Point an agent at it" not in text and "listening" not in text, text  # nothing started
    return done.stderr.strip().splitlines()


def test_run_with_a_missing_config_is_a_few_lines(home) -> None:
    lines = few_lines_no_traceback(_cli(home, "run", "--config", "nope.yaml"))
    assert lines == [
        "tooldisco run: --config names nope.yaml: no such file, and not a shipped config (api, passthrough, relevance, "
        "tool-search, tool_discovery)",
        "  fix: give a config file's path or a shipped name (--config relevance); `tooldisco init` writes a config "
        "of your own"]


def test_run_with_a_yaml_error_is_a_few_lines(home) -> None:
    (home / "bad.yaml").write_text("pipes:\n  tool_discovery:\n    enabled: true\nhosts: [default\n")
    lines = few_lines_no_traceback(_cli(home, "run", "--config", "bad.yaml"))
    assert lines[0].startswith("tooldisco run: config bad.yaml (from --config) is not valid YAML: line 5, column 1: ")
    assert lines[1] == "  fix: edit bad.yaml (every key: docs/configuration.md); `tooldisco doctor` checks it"


def test_a_key_typo_in_ones_own_config_is_reported_before_anything_starts(home) -> None:
    own = home / ".config" / "tooldisco" / "config.yaml"
    assert _cli(home, "init").returncode == 0
    own.write_text(own.read_text().replace("strategy: tool-search", "stratgy: tool-search"))
    lines = few_lines_no_traceback(_cli(home, "run"))
    assert lines == [
        "tooldisco run: config ~/.config/tooldisco/config.yaml (your own; `tooldisco init` wrote it): "
        "pipes.tool_discovery.stratgy: unknown key (did you mean 'strategy'?)",
        "  fix: edit ~/.config/tooldisco/config.yaml (every key: docs/configuration.md); `tooldisco doctor` checks it"]
    # The same config, the same message, from every command that reads it.
    for argv in (["doctor"], ["wrap", "python", "--", "true"]):
        done = _cli(home, *argv)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "pipes.tool_discovery.stratgy: unknown key" in done.stdout + done.stderr


def test_a_missing_config_in_the_variable_names_the_variable(home) -> None:
    lines = few_lines_no_traceback(_cli(home, "run", TOOLDISCO_CONFIG=str(home / "gone.yaml")))
    assert lines[0].startswith(f"tooldisco run: $TOOLDISCO_CONFIG names {home / 'gone.yaml'}: no such file")
    assert "unset it" in lines[1]


def test_a_busy_port_is_reported_before_the_banner(home, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "_listen_problem", LISTEN_PROBLEM)
    monkeypatch.setattr(cli.os, "execv", lambda *a: pytest.fail("started mitmdump"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["run", "-p", str(port)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"tooldisco run: 127.0.0.1:{port} is in use, so the proxy cannot listen there (another proxy, or a "
                   "tooldisco run already running?)",
                   f"  fix: stop that one, or pick another port: tooldisco run -p {port + 1}"]


def test_the_addon_finds_config_the_same_way_and_warns_toward_ones_own(home, tmp_path, monkeypatch, caplog) -> None:
    """mitmdump -s "$(tooldisco addon-path)" without the option: the user's file, else the shipped
    default, whose unlisted-host warning points at `tooldisco init`, never into the package."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=None)
        assert chain.options.config_path == str(userconfig.SHIPPED_DEFAULT)
        hint = chain.options.edit_hint
        assert "tooldisco init" in hint and "~/.config/tooldisco/config.yaml" in hint
        assert str(userconfig.SHIPPED_DIR) not in hint
    own = userconfig.user_config()
    userconfig.write(own, userconfig.template().replace("  - default", f"  - default\n  - {tmp_path.name}.example"))
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=None)
        assert chain.options.config_path == str(own)
        assert chain.options.edit_hint == str(own)
        tctx.configure(chain.options, tool_discovery_config="relevance")
        assert chain.options.config_path == str(userconfig.SHIPPED_DIR / "relevance.yaml")


async def test_the_unlisted_host_warning_under_the_shipped_config_names_tooldisco_init(home, tmp_path, monkeypatch,
                                                                                     caplog) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=None)
        f = flow(host="gateway.example.com")
        chain.requestheaders(f)
        await chain.request(f)
    [line] = [r.getMessage() for r in caplog.records if "is not in hosts" in r.getMessage()]
    assert line.endswith("add it (or a preset) to hosts: in a config of your own (`tooldisco init` writes "
                         "~/.config/tooldisco/config.yaml, which tooldisco and the addon then use)")
    assert "configs" not in line and "site-packages" not in line


def _attr(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _doc_rows() -> list[tuple[str, str, str]]:
    """(key as configuration.md writes it, its default cell, the key's path in ``Config``) for each
    key of each row: ``…x`` is ``tool_discovery.x``; ``a.b` / `.c`` names ``a.b`` and ``a.c``."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = []
    for line in doc.splitlines():
        if not line.startswith("| `"):
            continue
        key_cell, default_cell = (c.strip() for c in line.split("|")[1:3])
        keys = [k.strip().strip("`") for k in key_cell.split(" / ")]
        for key in keys:
            full = keys[0].rsplit(".", 1)[0] + key if key.startswith(".") else key
            path = "tool_discovery." + full[1:] if full.startswith("…") else full.removeprefix("pipes.")
            rows.append((key, default_cell, path))
    return rows


def test_the_documented_defaults_are_what_a_config_less_run_uses() -> None:
    """docs/configuration.md's default column against the shipped default's values (what runs
    without a config of one's own), and every key whose code default differs marked "left out"."""
    shipped, bare = load_config(userconfig.SHIPPED_DEFAULT), parse({}, env={})
    checked = 0
    rows = _doc_rows()
    by_cell: dict[str, list[str]] = {}
    for _key, cell, path in rows:
        by_cell.setdefault(cell, []).append(path)
    for key, cell, path in rows:
        try:
            value, left_out = _attr(shipped, path), _attr(bare, path)
        except AttributeError:
            continue  # prices[].…, …native.bedrock's words: not one attribute
        note = re.search(r"\s*\(left out of a file: (.*)\)$", cell)
        assert (note is not None) == (value != left_out and not path.endswith("enable_search_fallback")), (key, cell)
        cell = cell[:note.start()] if note else cell
        tokens = re.findall(r"`([^`]*)`", cell)
        if not tokens or re.sub(r"`[^`]*`", "", cell).strip(" /") not in ("", "(32 MiB)"):
            continue  # words, not a value: "per strategy", "— (off)", the native model lists
        names = by_cell[cell + (note.group(0) if note else "")]
        token = tokens[names.index(path)] if len(tokens) == len(names) else tokens[0]
        if isinstance(value, bool):
            assert token == str(value).lower(), (key, token, value)
        elif isinstance(value, int):
            assert int(token) == value, (key, token, value)
        elif isinstance(value, float):
            assert (float(token) if re.fullmatch(r"[\d.]+", token) else parse_duration(token, key)) == value, \
                (key, token, value)
        elif isinstance(value, str):
            assert token == value, (key, token, value)
        elif isinstance(value, tuple):
            assert tuple(yaml.safe_load(token)) == value, (key, token, value)
        else:
            continue
        checked += 1
    assert checked >= 45, checked  # most rows are a plain value
