"""Shared pieces for the scripts that measure a real mitmdump: percentiles, starting plain and
addon mitmdump (``tests/e2e/harness.py``) in front of a local upstream, sampling a process's RSS,
and printing a markdown table.

The harness and psutil are imported where used, so a script that only needs percentiles and
tables (``bench_retrieval.py``) imports this without the test rig.

Benchmarks compare the addon with plain mitmdump measured in the same run on the same machine,
because absolute figures on a shared 2-core box say little; everything here serves that pairing.
"""

from __future__ import annotations

import math
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "addon"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tooldisco.core.stats import percentile  # noqa: E402 (after the path is set)

if TYPE_CHECKING:
    from tests.e2e.harness import MitmDump

MiB = 1 << 20
SHIPPED_CONFIG = ROOT / "configs" / "tool_discovery.yaml"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"1G"``, ``"64M"``, ``"2KiB"``, ``"1000"`` -> bytes (binary multiples)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()])


def mb(n: float) -> str:
    return f"{n / MiB:.0f} MB"


def signed_mb(n: float) -> str:
    """``+12 MB`` / ``-3 MB``: a change of RSS."""
    return f"{'-' if n < 0 else '+'}{abs(n) / MiB:.0f} MB"


def p50_p95(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    """``"p50 / p95"`` of ``values`` times ``scale`` (e.g. 1000 for seconds shown as ms)."""
    if not values:
        return "n/a"
    return f"{percentile(values, 50) * scale:.{digits}f} / {percentile(values, 95) * scale:.{digits}f}"


def ratio(value: float, baseline: float, digits: int = 2) -> str:
    """``value / baseline`` as ``"1.23x"``; ``n/a`` when the baseline is zero or missing."""
    if not baseline or math.isnan(baseline) or math.isnan(value):
        return "n/a"
    return f"{value / baseline:.{digits}f}x"


def ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


# --- proxies ----------------------------------------------------------------------------------------


def addon_config(overrides: Mapping[str, Any] | None = None, base: Path = SHIPPED_CONFIG
                 ) -> Callable[[Path], str]:
    """The shipped config with the session store and telemetry moved into the instance's work dir,
    then ``overrides`` merged in (nested dicts merge, other values replace)."""

    def merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
        for k, v in new.items():
            if isinstance(v, Mapping) and isinstance(into.get(k), dict):
                merge(into[k], v)
            else:
                into[k] = v

    def write(workdir: Path) -> str:
        cfg = yaml.safe_load(base.read_text())
        cfg.setdefault("sessions", {})["dir"] = str(workdir / "sessions")
        cfg.setdefault("telemetry", {})["path"] = str(workdir / "tool_discovery.jsonl")
        merge(cfg, overrides or {})
        return yaml.safe_dump(cfg, sort_keys=False)

    return write


def start_plain(upstream: str, workdir: Path, extra_args: Sequence[str] = (), name: str = "plain") -> MitmDump:
    """Plain mitmdump (no script) sending the provider hosts to ``upstream`` (``http://host:port``)."""
    from tests.e2e.harness import MitmDump
    return MitmDump(workdir, upstream, extra_args=extra_args, name=name).start()


def start_addon(upstream: str, workdir: Path, overrides: Mapping[str, Any] | None = None,
                extra_args: Sequence[str] = (), name: str = "addon", start: bool = True) -> MitmDump:
    """mitmdump + the addon on the shipped config (store and telemetry in ``workdir``)."""
    from tests.e2e.harness import ADDON_PATH, MitmDump
    proxy = MitmDump(workdir, upstream, script=ADDON_PATH, config=addon_config(overrides),
                     extra_args=extra_args, name=name)
    return proxy.start() if start else proxy


def plain_and_addon(upstream: str, tmp: Path, overrides: Mapping[str, Any] | None = None,
                    extra_args: Sequence[str] = ()) -> list[tuple[str, MitmDump]]:
    """The same-run pair every proxy benchmark compares, not started: ``[("mitmdump", plain),
    ("mitmdump + addon", addon)]``, each in its own work dir under ``tmp``. Start and stop them one
    at a time or side by side, as the benchmark needs."""
    from tests.e2e.harness import MitmDump

    plain = MitmDump(workdir(tmp, "plain"), upstream, extra_args=extra_args, name="plain")
    return [("mitmdump", plain),
            ("mitmdump + addon", start_addon(upstream, workdir(tmp, "addon"), overrides, extra_args, start=False))]


def workdir(tmp: Path, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=tmp))


# --- RSS ----------------------------------------------------------------------------------------------


class Rss:
    """Samples one process's RSS every ``interval`` s in a thread, keeping the peak since the last
    ``reset``. With ``cap`` (bytes) it SIGKILLs the process once RSS passes it, so a runaway
    proxy cannot take the machine down; ``killed`` then says so."""

    def __init__(self, pid: int, interval: float = 0.02, cap: int | None = None) -> None:
        import psutil

        self._error = psutil.Error
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.cap = cap
        self.killed = False
        self.peak = 0
        self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rss-{pid}")
        self._thread.start()

    def now(self) -> int:
        try:
            rss = self.proc.memory_info().rss
        except self._error:
            return 0
        self.peak = max(self.peak, rss)
        if self.cap is not None and rss > self.cap and not self.killed:
            self.killed = True
            try:
                self.proc.kill()
            except self._error:
                pass
        return rss

    def reset(self) -> int:
        """Start a new peak from the current RSS (returned)."""
        self.peak = 0
        return self.now()

    def cpu(self) -> float:
        try:
            t = self.proc.cpu_times()
        except self._error:
            return 0.0
        return t.user + t.system

    def settled(self, idle_cpu: float = 0.05, most: float = 30.0) -> int:
        """RSS once the process has been idle for a second (background work ended), at most ``most`` s."""
        deadline = time.monotonic() + most
        cpu = self.cpu()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = self.cpu()
            if now - cpu < idle_cpu:
                break
            cpu = now
        return self.now()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.now()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (loopback included)."""
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}


# --- output -----------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (``|`` inside cells escaped); a header ending in ``:`` is right-aligned
    (numbers), the colon dropped."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    names = [h.removesuffix(":") for h in header]
    align = ["---:" if h.endswith(":") else "---" for h in header]
    lines = ["| " + " | ".join(cell(h) for h in names) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def section(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]], note: str = "") -> None:
    """Print ``#### title``, the table, and a note under it (the form README's sections take)."""
    print(f"\n#### {title}\n")
    print(table(header, rows))
    if note:
        print(f"\n{note}")
    sys.stdout.flush()
