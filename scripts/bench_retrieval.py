#!/usr/bin/env python3
"""Retrieval quality and latency of every tool-search backend, as a Markdown table.

Quality is measured on the BFCL tool-retrieval benchmark (../shared/bench/bfcl.json:
1,437 tools, 2,501 queries, each labelled with the tools its answer calls):

- recall@k: the share of a query's labelled tools in the top k, averaged over queries;
- nDCG@10: binary relevance, ideal order = all labelled tools first;
- complete@10: the share of queries with every labelled tool in the top 10.

Latency is the wall time of one ``search`` call with the index already built, over the
real catalog and over a catalog grown to ``--big`` tools with renamed copies of the
real ones (``srvN__<name>``, as if N more MCP servers offered them). Index build time
(first call on a new catalog; embeddings included for hybrid, read from the disk cache
when a previous run left them there) is shown too.

    /tmp/venv12/bin/python scripts/bench_retrieval.py
    /tmp/venv12/bin/python scripts/bench_retrieval.py --data other.json --backends bm25,hybrid
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "addon"))  # imported as the addon imports it

from tooldisco.providers.base import Tool  # noqa: E402
from tooldisco.search import BACKENDS, QueryError, Searcher, make_searcher  # noqa: E402
from tooldisco.search.index_cache import clear_all  # noqa: E402

LIMIT = 10


def tool_from_definition(definition: dict[str, Any]) -> Tool:
    """A ``Tool`` from a BFCL function definition ({name, description, parameters})."""
    properties = (definition.get("parameters") or {}).get("properties") or {}
    params = tuple(
        (pname, str(spec.get("description") or "") if isinstance(spec, dict) else "")
        for pname, spec in properties.items()
    )
    return Tool(
        name=definition["name"],
        raw=json.dumps(definition, sort_keys=True),
        description=definition.get("description") or "",
        params=params,
    )


def grow_catalog(tools: Sequence[Tool], size: int) -> tuple[Tool, ...]:
    """``tools`` plus renamed copies up to ``size`` distinct tools."""
    out = list(tools)
    copy = 0
    while len(out) < size:
        copy += 1
        for tool in tools[: size - len(out)]:
            definition = json.loads(tool.raw)
            definition["name"] = f"srv{copy}__{tool.name}"
            out.append(tool_from_definition(definition))
    return tuple(out)


@dataclass
class Quality:
    recall: dict[int, float]
    ndcg10: float
    complete10: float
    errors: int
    answered_by: Counter[str]


def quality(searcher: Searcher, tools: Sequence[Tool], queries: list[dict[str, Any]]) -> tuple[Quality, list[float]]:
    recall = {1: 0.0, 5: 0.0, 10: 0.0}
    ndcg = complete = 0.0
    errors = 0
    answered_by: Counter[str] = Counter()
    timings = []
    for q in queries:
        labels = set(q["labels"])
        start = time.perf_counter()
        try:
            ranking = searcher.rank(q["query"], tools, LIMIT)
            names = ranking.names
            answered_by[ranking.backend] += 1
        except QueryError:
            names = []
            errors += 1
        timings.append(time.perf_counter() - start)
        for k in recall:
            recall[k] += len(labels & set(names[:k])) / len(labels)
        dcg = sum(1 / math.log2(i + 2) for i, name in enumerate(names[:LIMIT]) if name in labels)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(labels), LIMIT)))
        ndcg += dcg / ideal
        complete += labels <= set(names[:LIMIT])
    n = len(queries)
    result = Quality({k: v / n for k, v in recall.items()}, ndcg / n, complete / n, errors, answered_by)
    return result, timings


def latency(searcher: Searcher, tools: Sequence[Tool], queries: list[str]) -> list[float]:
    timings = []
    for query in queries:
        start = time.perf_counter()
        try:
            searcher.search(query, tools, LIMIT)
        except QueryError:
            pass
        timings.append(time.perf_counter() - start)
    return timings


def build_time(searcher: Searcher, tools: Sequence[Tool]) -> float:
    start = time.perf_counter()
    searcher.search("warm up", tools, LIMIT)
    return time.perf_counter() - start


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / ".." / "shared" / "bench" / "bfcl.json"),
                        help="benchmark JSON {tools, queries} (default: ../shared/bench/bfcl.json)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated backends")
    parser.add_argument("--big", type=int, default=10_000, help="size of the grown catalog")
    parser.add_argument("--latency-queries", type=int, default=500,
                        help="queries (a seeded sample) timed on the grown catalog")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "tooldisco-bench-cache"),
                        help="embedding disk cache for hybrid")
    args = parser.parse_args()

    data = json.loads(Path(args.data).read_text())
    tools = tuple(tool_from_definition(d) for d in data["tools"])
    queries = data["queries"]
    big = grow_catalog(tools, args.big)
    sample = [q["query"] for q in random.Random(0).sample(queries, min(args.latency_queries, len(queries)))]

    rows = []
    notes = []
    for backend in args.backends.split(","):
        clear_all()  # each backend builds its own indexes (and those it falls back to)
        searcher = make_searcher(backend, cache_dir=args.cache_dir)
        build_small = build_time(searcher, tools)
        result, small_times = quality(searcher, tools, queries)
        build_big = build_time(searcher, big)
        big_times = latency(searcher, big, sample)
        rows.append(
            f"| {backend} | {result.recall[1]:.3f} | {result.recall[5]:.3f} | {result.recall[10]:.3f} "
            f"| {result.ndcg10:.3f} | {result.complete10:.3f} "
            f"| {percentile(small_times, 50) * 1e3:.2f} | {percentile(small_times, 95) * 1e3:.2f} "
            f"| {percentile(big_times, 50) * 1e3:.2f} | {percentile(big_times, 95) * 1e3:.2f} "
            f"| {build_small:.2f} | {build_big:.2f} |"
        )
        answered = ", ".join(f"{name} {count}" for name, count in result.answered_by.most_common())
        notes.append(f"- {backend}: answered by {answered}"
                     + (f"; {result.errors} queries refused as too long" if result.errors else ""))
        print(f"... {backend} done", file=sys.stderr)

    print(f"BFCL: {len(tools)} tools, {len(queries)} queries; latency at {len(tools)} tools over all "
          f"queries, at {len(big)} tools over {len(sample)} sampled queries; limit {LIMIT}.\n")
    print(f"| backend | recall@1 | recall@5 | recall@10 | nDCG@10 | complete@10 "
          f"| p50 ms {len(tools)} | p95 ms {len(tools)} | p50 ms {len(big)} | p95 ms {len(big)} "
          f"| build s {len(tools)} | build s {len(big)} |")
    print("|---" * 12 + "|")
    print("\n".join(rows))
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
