#!/usr/bin/env python3
"""Memory of mitmdump + the addon while it relays one long streamed answer.

    .venv/bin/python scripts/bench_stream_memory.py [--mib 100] [--plain]

A real mitmdump (``tests/e2e/harness.py``) with the addon on tool-search, in front of a raw
loopback upstream (``tests/e2e/test_e2e_bodies.py``) that streams an Anthropic answer whose
text is ``--mib`` MiB in 256-character deltas; the client reads it through the proxy and
counts the text. Prints the proxy's RSS before, its peak while the answer streamed (sampled
every 5 ms with psutil) and what is left 3 s after. ``--plain``: mitmdump without the addon,
streaming every answer, for comparison. A warm-up turn first (the first flow builds the
catalog's index), so the figures are the answer's own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config  # noqa: E402
from tests.e2e.test_e2e_bodies import HEADERS, URL, Sampler, Upstream, long_stream, request_body, rss  # noqa: E402

MiB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="MiB of text in the streamed answer")
    parser.add_argument("--plain", action="store_true", help="mitmdump without the addon")
    args = parser.parse_args()
    upstream = Upstream()
    with tempfile.TemporaryDirectory() as tmp:
        if args.plain:
            streaming = Path(tmp) / "stream.py"
            streaming.write_text("def responseheaders(flow):\n    flow.response.stream = True\n")
            mitm = MitmDump(Path(tmp), upstream.url, script=streaming, name="plain")
        else:
            mitm = MitmDump(Path(tmp), upstream.url, script=ADDON_PATH, name="addon",
                            config=partial(addon_config, strategy="tool-search", search={"backend": "bm25"}))
        mitm.start()
        try:
            with mitm.httpx_client() as client:
                upstream.answer = lambda h, seen: long_stream(h, 1 << 16)
                client.post(URL, content=request_body(stream=True), headers=HEADERS).raise_for_status()
                time.sleep(2)
                upstream.answer = lambda h, seen: long_stream(h, args.mib * MiB)
                before = rss(mitm)
                text = 0
                t0 = time.monotonic()
                with Sampler(mitm.proc.pid) as sampler:  # type: ignore[union-attr]
                    with client.stream("POST", URL, content=request_body(stream=True), headers=HEADERS) as response:
                        for chunk in response.iter_bytes():
                            text += chunk.count(b"z")
                took = time.monotonic() - t0
            time.sleep(3)
            after = rss(mitm)
        finally:
            mitm.stop()
            upstream.close()
    print(f"{'plain mitmdump' if args.plain else 'mitmdump + addon'}: {args.mib} MiB of text "
          f"({'whole' if text == args.mib * MiB else f'only {text} characters'}) in {took:.1f}s; RSS "
          f"before {before / MiB:.0f} MiB, peak {sampler.peak / MiB:.0f} MiB (+{(sampler.peak - before) / MiB:.0f}), "
          f"3 s after {after / MiB:.0f} MiB (+{(after - before) / MiB:.0f})")


if __name__ == "__main__":
    main()
