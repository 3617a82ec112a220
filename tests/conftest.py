import os
import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
# The engine package lives under addon/ (imported as the addon does); helpers as tests.*.
for path in (ROOT / "addon", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Property tests draw the same examples on every run and machine, so CI is reproducible and
# a failure can be replayed; HYPOTHESIS_PROFILE=explore draws fresh ones (locally, to hunt).
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("explore", deadline=None, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
