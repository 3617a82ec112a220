import sys
from pathlib import Path

# The engine package lives under addon/; tests import it the way the addon does.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "addon"))
