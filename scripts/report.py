#!/usr/bin/env python3
"""The HTML report over telemetry files, from a checkout: ``tooldisco report``'s page.

    .venv/bin/python scripts/report.py tool_discovery.jsonl [more.jsonl ...] -o report.html
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "addon"))

from tooldisco.report import page

if __name__ == "__main__":
    sys.exit(page.main(prog="scripts/report.py"))
