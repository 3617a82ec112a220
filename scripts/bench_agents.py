#!/usr/bin/env python3
"""What the real agent CLIs cost with the 125-tool MCP catalog, direct vs through the addon.

    .venv/bin/python scripts/bench_agents.py [--cases claude-tool-search,gemini,...]

Runs the MCP task of ``tests/e2e/test_agents_mcp.py`` (one ``cloud/get_secret`` call out of five
stdio MCP servers, 125 tools) with Claude Code (its tool search on, and off), Codex CLI (a model
it sends MCP namespaces to, and one it defers for itself) and Gemini CLI, each on three paths:

- **direct**: a plain mitmdump (HTTPS interception and map-remote to the fake, no addon);
- **addon**: mitmdump + the addon on the shipped ``configs/tool_discovery.yaml``;
- **addon, 0 upfront**: the same with ``defer.upfront: 0``, so the model must search (the e2e test's setting).

The fake provider runs in-process with its prefix-cache model on (``tests/fakeprovider/cache.py``)
and is reset before every run, so no run reads another's cache. Measured at the fake (what a
provider bills), every upstream request of the run included (the proxy's hidden search rounds, and
Gemini CLI's routing call): ``tools[]`` bytes per request on the wire and in the prompt (definitions
marked ``defer_loading`` are sent but not in the prompt until a search loads them), prompt tokens,
the cached share, billed input with ``scripts/bench_session.py``'s price ratios (Anthropic cache
write 1.25, read 0.1; OpenAI read 0.1; Gemini read 0.25), and the most search tools any request
offered (the proxy's and the client's own together; must be 1 at most). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import ratio, table  # noqa: E402
from scripts.bench_session import PRICES, SHIPPED, addon_config  # noqa: E402
from tests.e2e import agents  # noqa: E402
from tests.e2e.agents import MCP_CASES, McpRun  # noqa: E402
from tests.fakeprovider import FakeProvider  # noqa: E402

PATHS = {"direct": None, "addon": {}, "addon, 0 upfront": {"defer": {"upfront": 0}}}
PRICE_OF_API = {"anthropic": "anthropic", "openai-responses": "responses", "openai-chat": "chat",
                "gemini": "gemini"}


def prompt_tools(body: dict[str, Any]) -> list[Any]:
    """The part of ``tools[]`` the prompt holds: no ``defer_loading`` definition (a namespace keeps
    its other functions). A tool a search loads later counts where the search loads it, not here."""
    kept = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("defer_loading"):
            continue
        if tool.get("type") == "namespace":
            inner = [t for t in tool.get("tools") or [] if not t.get("defer_loading")]
            if inner:
                kept.append({**tool, "tools": inner})
            continue
        kept.append(tool)
    return kept


@dataclass
class Row:
    case: str
    path: str
    ok: bool
    requests: int
    wire_bytes: float
    prompt_bytes: float
    tokens: int
    cached: int
    billed: float
    max_search_tools: int
    note: str = ""


def measure(run: McpRun, path: str) -> Row:
    recs = [r for r in run.upstream if r.prompt is not None]
    price = PRICES[PRICE_OF_API[run.case.api]]
    tokens = sum(r.prompt["tokens"] for r in recs)
    cached = sum(r.prompt["cached"] for r in recs)
    ok = run.run.returncode == 0 and run.case.marker in run.run.stdout
    n = max(len(recs), 1)
    return Row(
        case=run.case.name,
        path=path,
        ok=ok,
        requests=len(recs),
        wire_bytes=sum(len(json.dumps(r.json.get("tools") or [])) for r in recs) / n,
        prompt_bytes=sum(len(json.dumps(prompt_tools(r.json))) for r in recs) / n,
        tokens=tokens,
        cached=cached,
        billed=cached * price.cached + (tokens - cached) * price.uncached,
        max_search_tools=max((len(agents.search_tools(r.json)) for r in recs), default=0),
        note="" if ok else f"exit {run.run.returncode}, marker missing" if run.run.returncode == 0 else
        f"exit {run.run.returncode}",
    )


def report(rows: list[Row], elapsed: float) -> None:
    direct = {r.case: r.billed for r in rows if r.path == "direct"}
    print(f"\n{len(rows)} runs in {elapsed:.0f} s\n")
    print(table(["agent run", "path", "ok", "upstream requests:", "`tools[]` KB per request, wire / prompt:",
                 "prompt tokens:", "cached:", "billed input:", "× direct:", "search tools per request (max):"],
                [(r.case, r.path, "yes" if r.ok else "NO " + r.note, r.requests,
                  f"{r.wire_bytes / 1024:.1f} / {r.prompt_bytes / 1024:.1f}", f"{r.tokens:,}",
                  f"{r.cached / r.tokens if r.tokens else 0.0:.0%}", f"{r.billed:,.0f}",
                  ratio(r.billed, direct.get(r.case, 0.0)), r.max_search_tools) for r in rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(n for n, c in MCP_CASES.items() if c.mixed is None),
                        help="comma-separated cases (default: all but the mixed-turn checks, which measure "
                             "nothing more)")
    parser.add_argument("--smoke", action="store_true",
                        help="one case (claude-tool-search), direct and addon only: checks the script works; "
                             "exits 0 with a note when npm/node are missing, as the agent tests skip")
    args = parser.parse_args()
    cases = [MCP_CASES[c] for c in ("claude-tool-search" if args.smoke else args.cases).split(",")]
    paths = {p: PATHS[p] for p in (("direct", "addon") if args.smoke else PATHS)}
    if not agents.npm_available():
        if args.smoke:
            print("skipped: npm/node are not installed, so the agent CLIs cannot be installed")
            return
        sys.exit("npm/node are not installed: the agent CLIs cannot be installed")
    bins = agents.install_agents()
    start = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp, FakeProvider(stream_delay=0.0) as fake:
        for path, overrides in paths.items():
            workdir = Path(tmp) / f"path{len(rows)}"  # equal lengths: the agents put their cwd in the prompt
            config = None if overrides is None else _config(overrides)
            proxy = agents.recorded_proxy(workdir, fake.url, config, name=path).start()
            try:
                for case in cases:
                    fake.reset()
                    fake.prompt_cache = True
                    run = agents.run_mcp_case(case, proxy, fake, bins, workdir / case.name)
                    rows.append(measure(run, path))
                    print(f"{case.name} / {path}: {rows[-1]}", file=sys.stderr)
            finally:
                proxy.stop()
    rows.sort(key=lambda r: ([c.name for c in cases].index(r.case), list(paths).index(r.path)))
    report(rows, time.monotonic() - start)


def _config(overrides: dict[str, Any]) -> Any:
    """The shipped config with ``defer`` settings merged in (``addon_config`` replaces whole keys)."""
    import yaml

    shipped = yaml.safe_load(SHIPPED.read_text())["pipes"]["tool_discovery"]
    merged = {k: {**shipped.get(k, {}), **v} if isinstance(v, dict) else v for k, v in overrides.items()}
    return addon_config(SHIPPED, merged)


if __name__ == "__main__":
    main()
