"""Run the fake provider by hand: ``python -m tests.fakeprovider --port 8765``."""

from __future__ import annotations

import argparse
import json
import logging
import threading

from .server import FakeProvider


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeprovider", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--stream-delay", type=float, default=0.05, help="seconds between streamed events")
    parser.add_argument("--script", help="JSON file with a script ({'rules': [...]}), as for POST /_script")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(message)s")

    fake = FakeProvider(args.host, args.port, stream_delay=args.stream_delay).start()
    if args.script:
        with open(args.script) as f:
            fake.set_script(json.load(f))
    print(f"fake provider listening at {fake.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
