"""Which config a ``tooldisco`` command (or the addon) uses, and the one ``tooldisco init`` writes.

The first of these that is set wins, the same for every command:

1. ``--config PATH`` (the addon: mitmproxy's ``tool_discovery_config`` option);
2. ``$TOOLDISCO_CONFIG``; then ``$CONFIG``, its older name (the ``tooldisco`` command only);
3. the user's own file, ``$XDG_CONFIG_HOME/tooldisco/config.yaml`` (``~/.config/tooldisco/config.yaml``),
   which ``tooldisco init`` writes;
4. the shipped default, ``tool_discovery.yaml`` inside the package (a reinstall replaces it).

A value of 1 or 2 that names no file but a shipped config (``relevance``, ``tool-search.yaml``)
is that shipped config. Plain files and words only: no mitmproxy, no YAML parsing (the command
and the addon both use it; ``tooldisco.config`` validates what is found).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent / "configs"
SHIPPED_DEFAULT = SHIPPED_DIR / "tool_discovery.yaml"
ENV = "TOOLDISCO_CONFIG"
OLD_ENV = "CONFIG"  # what scripts/run and the first releases read; still honoured after $TOOLDISCO_CONFIG
DOCS = "docs/configuration.md"  # every key, in tooldisco's source tree


class NotFound(Exception):
    """A config named (by --config or the environment) that is neither a file nor a shipped name.
    ``str()`` is what went wrong; ``fix`` what to do about it."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.fix = fix


@dataclass(frozen=True)
class Found:
    """The config a command uses and why (``source``: option, env, old-env, user, shipped)."""

    path: Path
    source: str
    named: str = ""  # the shipped config's name, when it was asked for by name

    @property
    def why(self) -> str:
        """Where it came from, in words."""
        if self.source == "user":
            return "your own; `tooldisco init` wrote it" if _written_by_init(self.path) else "your own"
        if self.source == "shipped":
            return "the shipped default; `tooldisco init` writes one of your own"
        by = {"option": "--config", "env": f"${ENV}", "old-env": f"${OLD_ENV}, the older name of ${ENV}"}[self.source]
        return f"shipped config {self.named!r}, from {by}" if self.named else f"from {by}"

    def line(self, command: str = "tooldisco") -> str:
        """The one line a command prints (on stderr) to say which config it uses."""
        return f"{command}: config {shown(self.path)} ({self.why})"

    @property
    def shipped(self) -> bool:
        return is_shipped(self.path)


def shown(path: str | os.PathLike[str]) -> str:
    """A path as a person types it: the home directory as ``~``."""
    text = str(path)
    home = str(Path.home())
    if home not in ("", "/") and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")):]
    return text


def shipped_names() -> list[str]:
    """The shipped configs' names (``relevance``, ``tool-search``, ...), the default last."""
    names = sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml") if p != SHIPPED_DEFAULT)
    return [*names, SHIPPED_DEFAULT.stem]


def shipped(name: str) -> Path | None:
    """The shipped config a bare name (with or without ``.yaml``) stands for, or None."""
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    if not stem or "/" in name or os.sep in name:
        return None
    path = SHIPPED_DIR / f"{stem}.yaml"
    return path if path.is_file() else None


def is_shipped(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is one of the package's own configs (site-packages: a reinstall replaces it)."""
    try:
        return Path(path).expanduser().resolve().parent == SHIPPED_DIR
    except OSError:
        return False


def user_config(env: Mapping[str, str] | None = None) -> Path:
    """The user's own config: ``$XDG_CONFIG_HOME/tooldisco/config.yaml``, else ``~/.config/...``
    (a relative ``XDG_CONFIG_HOME`` is ignored, as the XDG spec says)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".config"
    return root / "tooldisco" / "config.yaml"


def _named(value: str, source: str, by: str, fix: str) -> Found:
    path = Path(value).expanduser()
    if path.exists():  # a file of that name wins over a shipped name (a directory fails where it is read)
        return Found(path, source)
    if (ship := shipped(value)) is not None:
        return Found(ship, source, ship.stem)
    raise NotFound(f"{by} names {value}: no such file, and not a shipped config ({', '.join(shipped_names())})",
                   fix)


def find(explicit: str | None = None, env: Mapping[str, str] | None = None, *, old_env: bool = True,
         flag: str = "--config") -> Found:
    """The config to use (module docstring); raises ``NotFound`` for a named one that is not there.
    ``explicit``: the value of ``flag`` (the command's --config, the addon's option)."""
    env = os.environ if env is None else env
    init = "`tooldisco init` writes a config of your own"
    if explicit:
        return _named(explicit, "option", flag,
                      f"give a config file's path or a shipped name ({flag} relevance); {init}")
    for var, source in ((ENV, "env"), (OLD_ENV, "old-env")) if old_env else ((ENV, "env"),):
        if value := env.get(var, "").strip():
            return _named(value, source, f"${var}",
                          f"point ${var} at a config file or a shipped name, or unset it; {init}")
    if (own := user_config(env)).is_file():
        return Found(own, "user")
    return Found(SHIPPED_DEFAULT, "shipped")


def edit_hint(path: str | os.PathLike[str]) -> str:
    """Where to make a change to the config at ``path``: the file itself, or, for a shipped one
    (inside the installed package, replaced by a reinstall), a config of the user's own."""
    if is_shipped(path):
        return (f"a config of your own (`tooldisco init` writes {shown(user_config())}, which tooldisco and "
                "the addon then use)")
    return str(path)


# --- tooldisco init -------------------------------------------------------------------------

HEADER = """\
# tooldisco: a config of your own, written by `tooldisco init` from the shipped {name}.yaml.
# Every tooldisco command (run, doctor, wrap, forget, tools) and the addon in a mitmdump of your
# own read it unless --config, $TOOLDISCO_CONFIG or mitmproxy's tool_discovery_config says
# otherwise; they print which config they use. Edit it freely: a reinstall leaves it alone.
# It sets every key the shipped config sets, so it behaves as the shipped default until you change
# it; a key left out takes the code's default (pipes.tool_discovery.enabled left out is false:
# nothing is rewritten). Every key: docs/configuration.md in tooldisco's source;
# `tooldisco doctor` checks this file, the CA and the agent variables.
"""


def template(name: str = SHIPPED_DEFAULT.stem) -> str:
    """The text ``tooldisco init`` writes: ``HEADER``, then the shipped config ``name`` without
    its own opening comment (which speaks of the shipped file)."""
    source = shipped(name)
    if source is None:
        raise NotFound(f"no shipped config named {name} ({', '.join(shipped_names())})",
                       "name one of them, e.g. --from relevance")
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    body = "".join(lines).lstrip("\n")
    if "enabled:" not in body:  # every shipped config sets it: a copy must never be silently off
        raise ValueError(f"{source} sets no pipes.tool_discovery.enabled")
    return HEADER.format(name=source.stem) + "\n" + body


def write(path: Path, text: str, force: bool = False) -> Path:
    """Write ``text`` to ``path``, mode 0600, its missing directories 0700; an existing file is
    kept unless ``force`` (then replaced in one rename). Raises ``FileExistsError`` or ``OSError``."""
    path = path.expanduser()
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
        os.chmod(directory, 0o700)  # whatever the umask
    if not force:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path
    fd, tmp = tempfile.mkstemp(prefix=".tooldisco-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _written_by_init(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return "written by `tooldisco init`" in f.readline()
    except (OSError, UnicodeDecodeError):
        return False
