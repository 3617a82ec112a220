"""The allocator setting: large blocks freed by worker threads go back to the OS."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ADDON = Path(__file__).resolve().parents[3] / "addon"

PROBE = textwrap.dedent("""
    import json, sys
    from concurrent.futures import ThreadPoolExecutor
    import psutil
    sys.path.insert(0, sys.argv[2])
    if sys.argv[1] == "on":
        from tooldisco.core.allocator import return_large_blocks
        assert return_large_blocks()

    def work(i):  # what a 30 MB request body goes through: decode, parse, re-serialize
        text = json.dumps({"content": ("log line %d " % i) * 2_500_000})
        return len(json.dumps(json.loads(text)).encode())

    base = psutil.Process().memory_info().rss
    with ThreadPoolExecutor(4) as pool:
        for _ in range(2):
            list(pool.map(work, range(4)))
    print((psutil.Process().memory_info().rss - base) >> 20)
""")


def left_behind(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode, str(ADDON)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc tuning")
def test_huge_bodies_leave_nothing_behind():
    assert left_behind("on") < 16  # MiB: what the interpreter's own growth may take
    assert left_behind("off") > 64  # the probe does show the problem without the setting


def test_the_youngest_generation_is_collected_less_often(monkeypatch):
    """Decoding a large body makes a container per JSON value: the youngest generation's threshold
    is raised so it sets off few collections; the older thresholds stay, collection off stays off,
    a higher setting is kept."""
    import gc

    from tooldisco.core import allocator

    calls = []
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(t))
    monkeypatch.setattr(gc, "get_threshold", lambda: (2000, 10, 10))
    allocator.collect_less_often()
    assert calls == [(allocator.GC_YOUNG, 10, 10)] and allocator.GC_YOUNG >= 20_000
    calls.clear()
    for kept in [(0, 10, 10), (10 * allocator.GC_YOUNG, 5, 5)]:
        monkeypatch.setattr(gc, "get_threshold", lambda kept=kept: kept)
        allocator.collect_less_often()
    assert calls == []
