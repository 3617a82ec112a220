"""mitmproxy entry point in a checkout: ``mitmdump -s addon/tool_discovery.py``.

The same addons as the installed package's script (``tooldisco/script/tool_discovery.py``, whose
path ``tooldisco addon-path`` prints); this file puts the checkout's package first on the path,
so the checkout's code runs whatever else is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tooldisco.script.tool_discovery import DEFAULT_CONFIG, addons, build

__all__ = ["DEFAULT_CONFIG", "addons", "build"]
