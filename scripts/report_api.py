#!/usr/bin/env python3
"""The api strategy's selector tables in Markdown, from a checkout: ``tooldisco report --selector``.

    python scripts/report_api.py [tool_discovery.jsonl] [--since 2026-05-01T09:00 | 1777626000]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "addon"))

from tooldisco.report import selector

if __name__ == "__main__":
    sys.exit(selector.main())
