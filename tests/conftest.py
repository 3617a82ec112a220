import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The engine package lives under addon/ (imported as the addon does); helpers as tests.*.
for path in (ROOT / "addon", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
