"""mitmproxy entry point of the installed package: ``mitmdump -s "$(tooldisco addon-path)"``.

Loads the glue's addons in chain order (``tooldisco.glue.chain``). A mitmproxy whose Python lacks
a dependency of the addon (mitmproxy installed alone, by pipx or uv) gets one line naming the
command that installs it, and mitmdump exits: a proxy silently running without the addon would
forward every request unchanged while the user believes it works.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from tooldisco.glue.chain import DEFAULT_CONFIG, build
except ModuleNotFoundError as e:
    top = (e.name or "").partition(".")[0]
    if top in ("", "tooldisco"):
        raise
    # A checkout holds pyproject.toml two levels above the package (addon/tooldisco).
    checkout = Path(__file__).resolve().parents[3]
    source = str(checkout) if (checkout / "pyproject.toml").is_file() else "<tooldisco checkout or wheel>"
    raise SystemExit(
        f"tooldisco: missing dependency {top!r} in {sys.executable}: run  {sys.executable} -m pip install "
        f"{source}  (or: uv tool install mitmproxy --with {source})"
    ) from None

__all__ = ["DEFAULT_CONFIG", "addons", "build"]

addons = build()
