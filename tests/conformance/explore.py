"""Replay every recording through plain mitmdump and mitmdump with the addon; print what differs.

    .venv/bin/python -m tests.conformance.explore [--stitched] [ID-SUBSTRING]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

from tests.conformance.replay import Upstream, differences, client_request, load, search_round
from tests.e2e.harness import ADDON_PATH, REPO_ROOT, MitmDump


def shipped_config(workdir: Path) -> str:
    """The shipped default config, its session store and telemetry inside ``workdir``."""
    doc = yaml.safe_load((REPO_ROOT / "configs" / "tool_discovery.yaml").read_text())
    doc["sessions"]["dir"] = str(workdir / "sessions")
    doc["telemetry"] = {"path": str(workdir / "tool_discovery.jsonl")}
    return yaml.safe_dump(doc, sort_keys=False)


def fetch(proxy: MitmDump, upstream: Upstream, rec, *answers) -> tuple[int, bytes, int]:
    upstream.serve(*answers)
    url, headers, body = client_request(rec)
    with proxy.httpx_client() as client:
        r = client.post(url, headers={**headers, "content-type": "application/json"}, content=body)
    return r.status_code, r.content, len(upstream.bodies)


def main() -> None:
    stitched = "--stitched" in sys.argv
    needle = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    recs = [r for r in load() if needle in r.id]
    work = Path(tempfile.mkdtemp())
    upstream = Upstream().start()
    plain = MitmDump(work / "plain", upstream.url, script=None).start()
    addon = MitmDump(work / "addon", upstream.url, script=ADDON_PATH,
                     config=shipped_config).start()
    bad = 0
    try:
        for rec in recs:
            p = fetch(plain, upstream, rec, rec)
            answers = (search_round(rec), rec) if stitched and rec.status == 200 else (rec,)
            a = fetch(addon, upstream, rec, *answers)
            diff = [] if stitched else differences(rec, p[1], a[1])
            if p[0] != a[0] or diff or a[2] != len(answers):
                bad += 1
                print(f"DIFF {rec.id} ({rec.api} stream={rec.stream}) status {p[0]}/{a[0]} hits {a[2]}")
                if "-v" in sys.argv:
                    print("\n".join(diff[:6]))
    finally:
        plain.stop()
        addon.stop()
        upstream.stop()
    print(f"{bad} of {len(recs)} differ; logs in {work}")


if __name__ == "__main__":
    main()
