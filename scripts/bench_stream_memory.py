#!/usr/bin/env python3
"""Memory of mitmdump + the addon while it relays one long streamed answer.

    .venv/bin/python scripts/bench_stream_memory.py [--mib 100]

A real mitmdump (``tests/e2e/harness.py``) with the addon on tool-search, in front of a raw
loopback upstream (``tests/e2e/test_e2e_bodies.py``) that streams an Anthropic answer whose
text is ``--mib`` MiB in 256-character deltas; the client reads it through the proxy and
counts the text. Prints the proxy's RSS before, its peak while the answer streamed (sampled
every 5 ms with psutil) and what is left ``--after`` seconds later (3), for mitmdump + the addon and for plain
mitmdump streaming every answer (the baseline, measured in the same run, one after the other),
with the addon's growth against plain's. A warm-up turn first (the first flow builds the
catalog's index), so the figures are the answer's own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import MiB, Rss, ratio, section  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config  # noqa: E402
from tests.e2e.test_e2e_bodies import HEADERS, URL, Upstream, long_stream, request_body  # noqa: E402


def measure(mitm: MitmDump, upstream: Upstream, mib: int, after_s: float) -> dict[str, Any]:
    """One long answer through ``mitm`` (started here, stopped after): RSS before, peak, ``after_s`` after."""
    mitm.start()
    try:
        with mitm.httpx_client() as client:
            upstream.answer = lambda h, seen: long_stream(h, 1 << 16)
            client.post(URL, content=request_body(stream=True), headers=HEADERS).raise_for_status()
            time.sleep(after_s)  # the warm-up's background work (the catalog's index) ends
            upstream.answer = lambda h, seen: long_stream(h, mib * MiB)
            rss = Rss(mitm.proc.pid, interval=0.005)  # type: ignore[union-attr]
            before = rss.reset()
            text = 0
            t0 = time.monotonic()
            with client.stream("POST", URL, content=request_body(stream=True), headers=HEADERS) as response:
                for chunk in response.iter_bytes():
                    text += chunk.count(b"z")
            took = time.monotonic() - t0
            rss.stop()
        time.sleep(after_s)
        after = rss.now()
    finally:
        mitm.stop()
    return {"whole": text == mib * MiB, "text": text, "took": took, "before": before, "peak": rss.peak,
            "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="MiB of text in the streamed answer")
    parser.add_argument("--after", type=float, default=3.0, help="seconds to wait before the last RSS reading")
    args = parser.parse_args()
    upstream = Upstream()
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            streaming = Path(tmp) / "stream.py"
            streaming.write_text("def responseheaders(flow):\n    flow.response.stream = True\n")
            (Path(tmp) / "plain").mkdir()
            (Path(tmp) / "addon").mkdir()
            results["plain mitmdump, streaming (baseline)"] = measure(
                MitmDump(Path(tmp) / "plain", upstream.url, script=streaming, name="plain"), upstream, args.mib, args.after)
            results["mitmdump + addon"] = measure(
                MitmDump(Path(tmp) / "addon", upstream.url, script=ADDON_PATH, name="addon",
                         config=partial(addon_config, strategy="tool-search", search={"backend": "bm25"})),
                upstream, args.mib, args.after)
    finally:
        upstream.close()
    base = next(iter(results.values()))
    section(f"RSS while {args.mib} MiB of text stream through (baseline: plain mitmdump, same run)",
            ["proxy", "text", "s:", "before:", "peak:", "peak growth:", f"{args.after:g} s after:", "growth / plain's:"],
            [(name, "whole" if r["whole"] else f"only {r['text']} characters", f"{r['took']:.1f}",
              f"{r['before'] / MiB:.0f} MiB", f"{r['peak'] / MiB:.0f} MiB", f"{(r['peak'] - r['before']) / MiB:+.0f} MiB",
              f"{(r['after'] - r['before']) / MiB:+.0f} MiB",
              ratio(max(r["peak"] - r["before"], MiB), max(base["peak"] - base["before"], MiB)))
             for name, r in results.items()])


if __name__ == "__main__":
    main()
