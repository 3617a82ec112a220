#!/usr/bin/env python3
"""Retrieval quality and latency of every tool-search backend, as Markdown tables.

Labelled sets (recall@1/5/10, nDCG@10, complete@10; every query searched with limit 10):

- BFCL (../shared/bench/bfcl.json: 1,437 tools, 2,501 queries labelled with the tools
  their answers call; built from the PyPI package bfcl-eval by make_bfcl.py);
- BFCL multi-turn: the agent tasks of bfcl-eval's multi_turn_base category (one query a
  user turn, labelled with the functions its ground truth calls) over the 12 multi-turn
  APIs (file system, messaging, trading, travel...); read from the same wheel, which
  pip downloads once into ``--cache-dir`` (or ``--bfcl-wheel``);
- multi-intent: 2 or 3 BFCL queries pasted together (at most 1,000 characters, the query
  cap), labelled with the union of their labels; seeded.

Named-tool sets (the share of queries whose first result is a tool the query names, with
every tool it names among the results): each tool's full name, its bare name (without
``mcp__server__`` / ``mcp_server_`` / namespace), its humanized bare name, and each
server's name (all of its tools must be among the results) — over the BFCL catalog and
over a 500-tool MCP catalog in Claude Code's (``mcp__s__t``) and Gemini CLI's
(``mcp_s_t``) naming. A bare name several tools share names them all.

Latency is the wall time of one ``rank`` call with the index built, over the BFCL catalog
(every query) and over a catalog grown to ``--big`` tools with renamed copies
(``srvN__<name>``, as if more MCP servers offered them; ``--latency-queries`` sampled
queries). Build time is the first call on a new catalog (embeddings included for hybrid,
read from the disk cache when a previous run left them there).

    .venv/bin/python scripts/bench_retrieval.py
    .venv/bin/python scripts/bench_retrieval.py --backends bm25,hybrid --sets bfcl,multi-intent
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "addon"))  # imported as the addon imports it
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from _bench import percentile, ratio, section  # noqa: E402
from tests.support.mcp_catalog import mcp_catalog  # noqa: E402
from tooldisco.core.types import Tool  # noqa: E402
from tooldisco.search.factory import BACKENDS, make_searcher, with_priors  # noqa: E402
from tooldisco.search import priors  # noqa: E402
from tooldisco.search.base import QueryError, Ranking, Searcher  # noqa: E402
from tooldisco.search.base import WARM_UP_QUERY, Catalog  # noqa: E402
from tooldisco.search.index_cache import clear_all  # noqa: E402
from tooldisco.search.names import MAX_NAMED, name_forms  # noqa: E402
from tooldisco.search.tokens import words  # noqa: E402

LIMIT = 10
MAX_QUERY = 1000
BFCL_EVAL = "bfcl-eval==2026.3.23"
MULTI_TURN_DOCS = "bfcl_eval/data/multi_turn_func_doc/"
MULTI_TURN = "bfcl_eval/data/BFCL_v4_multi_turn_base.json"
MULTI_TURN_ANSWERS = "bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_base.json"


@dataclass
class Query:
    text: str
    labels: frozenset[str]


@dataclass
class LabelledSet:
    name: str
    tools: tuple[Tool, ...]
    queries: list[Query]
    named: bool = False  # scored as a named-tool set (first result named, all named present)


def tool_from_definition(definition: dict[str, Any]) -> Tool:
    """A ``Tool`` from a function definition ({name, description, parameters})."""
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


# --- the sets --------------------------------------------------------------------------


def bfcl(path: Path) -> LabelledSet:
    data = json.loads(path.read_text())
    tools = tuple(tool_from_definition(d) for d in data["tools"])
    return LabelledSet("BFCL", tools, [Query(q["query"], frozenset(q["labels"])) for q in data["queries"]])


def bfcl_wheel(cache_dir: Path, given: str | None) -> Path:
    """The bfcl-eval wheel: ``given``, or downloaded once into ``cache_dir`` with pip."""
    if given:
        return Path(given)
    found = sorted(cache_dir.glob("bfcl_eval-*.whl"))
    if not found:
        cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache_dir), BFCL_EVAL],
                       check=True)
        found = sorted(cache_dir.glob("bfcl_eval-*.whl"))
    return found[-1]


def bfcl_multi_turn(wheel: Path) -> LabelledSet:
    """Each user turn of multi_turn_base, labelled with the functions its answer calls."""
    zf = zipfile.ZipFile(wheel)
    def lines(name: str) -> list:
        return [json.loads(line) for line in zf.read(name).decode().splitlines() if line.strip()]
    by_name: dict[str, Tool] = {}
    for doc in sorted(n for n in zf.namelist() if n.startswith(MULTI_TURN_DOCS) and n.endswith(".json")):
        for definition in lines(doc):
            by_name.setdefault(definition["name"], tool_from_definition(definition))
    answers = {row["id"]: row["ground_truth"] for row in lines(MULTI_TURN_ANSWERS)}
    queries = []
    for row in lines(MULTI_TURN):
        for turn, calls in zip(row["question"], answers[row["id"]]):
            text = " ".join(m["content"] for m in turn if m["role"] == "user")
            labels = frozenset(call.split("(", 1)[0].strip() for call in calls) & by_name.keys()
            if text and labels:
                queries.append(Query(text, labels))
    return LabelledSet("BFCL multi-turn", tuple(by_name.values()), queries)


def multi_intent(base: LabelledSet, count: int = 600, seed: int = 0) -> LabelledSet:
    """2 or 3 queries of ``base`` pasted together, labelled with all their labels."""
    rng = random.Random(seed)
    queries = []
    while len(queries) < count:
        picks = rng.sample(base.queries, rng.choice((2, 3)))
        text = " ".join(q.text.strip() for q in picks)
        if len(text) <= MAX_QUERY:
            queries.append(Query(text, frozenset().union(*(q.labels for q in picks))))
    return LabelledSet("multi-intent (2-3 BFCL queries)", base.tools, queries)


def named_sets(title: str, tools: tuple[Tool, ...], bare_of: Callable[[str], str | None],
               server_of: Callable[[str], str | None]) -> list[LabelledSet]:
    """Full-name, bare-name, humanized-name and server-name queries over ``tools``. A query
    names every tool that has it as a name form (``names.name_forms``); queries naming more
    than ``MAX_NAMED`` tools (a phrase, not a name) are left out."""
    owners: dict[tuple[str, ...], set[str]] = {}
    for tool in tools:
        fulls, bares, _ = name_forms(tool.name)
        for form in (*fulls, *bares):
            owners.setdefault(form, set()).add(tool.name)

    def query(text: str, exact: str | None = None) -> Query | None:
        named = owners.get(tuple(words(text)), set())
        return Query(text, frozenset({exact} if exact else named)) if 0 < len(named) <= MAX_NAMED else None

    bares = {b for t in tools if (b := bare_of(t.name))}
    servers: dict[str, set[str]] = {}
    for t in tools:
        if server := server_of(t.name):
            servers.setdefault(server, set()).add(t.name)
    candidates = {
        "full names": [query(t.name, t.name) for t in tools],
        "bare names": [query(b) for b in sorted(bares)],
        "humanized names": [query(" ".join(words(b))) for b in sorted(bares)]
        + [query(" ".join(words(t.name))) for t in tools if not bare_of(t.name)],
        "server names": [Query(s, frozenset(o)) for s, o in sorted(servers.items())],
    }
    return [LabelledSet(f"{title}: {kind}", tools, [q for q in qs if q], named=True)
            for kind, qs in candidates.items() if any(qs)]


def mcp_tools(style: str) -> tuple[tuple[Tool, ...], dict[str, tuple[str, str]]]:
    """The 500-tool MCP catalog (tests/support/mcp_catalog.py) in Claude Code's
    ``mcp__server__tool`` or Gemini CLI's ``mcp_server_tool`` naming, and each name's
    (server, bare name)."""
    tools, parts = [], {}
    for t in mcp_catalog():
        bare = t.name.removeprefix(f"mcp__{t.server}__")
        name = t.name if style == "claude" else f"mcp_{t.server}_{bare}"
        parts[name] = (t.server, bare)
        tools.append(tool_from_definition({"name": name, "description": t.description, "parameters": t.schema}))
    return tuple(tools), parts


def _namespace_bare(name: str) -> str | None:
    """``T`` of ``S__T``, ``S/T``, ``S.T``, ``S:T`` (BFCL's namespaces, the grown catalog's copies)."""
    for sep in ("__", "/", ".", ":"):
        if sep in name:
            return name.split(sep)[-1]
    return None


# --- measuring -------------------------------------------------------------------------


@dataclass
class Result:
    recall: dict[int, float] = field(default_factory=dict)
    ndcg10: float = 0.0
    complete10: float = 0.0
    named_first: float = 0.0
    timings: list[float] = field(default_factory=list)
    answered_by: Counter[str] = field(default_factory=Counter)
    refused: int = 0


def timed_rank(searcher: Searcher, query: str, tools: Sequence[Tool]) -> tuple[Ranking | None, float, float, float]:
    """The ranking, the wall time and the CPU time of this process (every thread: the
    model's too) of one call, and the wall time of its catalog's key. On a shared machine
    the wall time measures the neighbours as well; the CPU time does not."""
    # A new catalog of the same tools, as the proxy builds one per request: its key is made
    # when the request is planned (the warm-up), before any search, and the searches share it.
    catalog = Catalog(list(tools))
    keyed = time.perf_counter()
    _ = catalog.key  # made now, timed
    start, cpu = time.perf_counter(), time.process_time()
    try:
        ranking: Ranking | None = searcher.rank(query, catalog, LIMIT)
    except QueryError:
        ranking = None
    return ranking, time.perf_counter() - start, time.process_time() - cpu, start - keyed


def measure(searcher: Searcher, labelled: LabelledSet) -> Result:
    result = Result(recall={1: 0.0, 5: 0.0, 10: 0.0})
    for q in labelled.queries:
        ranking, seconds, _, _ = timed_rank(searcher, q.text, labelled.tools)
        result.timings.append(seconds)
        if ranking is None:
            result.refused += 1
            continue
        result.answered_by[ranking.backend] += 1
        names = ranking.names
        if labelled.named:
            result.named_first += bool(names) and names[0] in q.labels and q.labels <= set(names)
            continue
        for k in result.recall:
            result.recall[k] += len(q.labels & set(names[:k])) / len(q.labels)
        dcg = sum(1 / math.log2(i + 2) for i, name in enumerate(names[:LIMIT]) if name in q.labels)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(q.labels), LIMIT)))
        result.ndcg10 += dcg / ideal
        result.complete10 += q.labels <= set(names[:LIMIT])
    n = len(labelled.queries)
    result.recall = {k: v / n for k, v in result.recall.items()}
    result.ndcg10 /= n
    result.complete10 /= n
    result.named_first /= n
    return result


def latency(searcher: Searcher, tools: Sequence[Tool], queries: list[str]) -> tuple[list[float], ...]:
    """(wall times, CPU times, catalog key times) of ``queries``."""
    times = [timed_rank(searcher, query, tools)[1:] for query in queries]
    return tuple(list(column) for column in zip(*times))


def paired_latency(first: Searcher, second: Searcher, tools: Sequence[Tool], queries: list[str]
                   ) -> tuple[list[float], list[float]]:
    """Wall times of two searchers on the same queries, interleaved (which goes first
    alternates), so a busy neighbour slows both alike and their ratio holds."""
    a: list[float] = []
    b: list[float] = []
    for i, query in enumerate(queries):
        pair = ((first, a), (second, b)) if i % 2 else ((second, b), (first, a))
        for searcher, walls in pair:
            walls.append(timed_rank(searcher, query, tools)[1])
    return a, b


def build_time(searcher: Searcher, tools: Sequence[Tool]) -> float:
    """The first call on a new catalog, which builds every index the backend may use."""
    return timed_rank(searcher, WARM_UP_QUERY, tools)[1]


def ms(values: list[float], p: int) -> str:
    return f"{percentile(values, p) * 1e3:.2f}"


# --- report ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / ".." / "shared" / "bench" / "bfcl.json"),
                        help="BFCL benchmark JSON {tools, queries} (default: ../shared/bench/bfcl.json)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated backends")
    parser.add_argument("--sets", default="bfcl,multi-turn,multi-intent,named",
                        help="comma-separated: bfcl, multi-turn, multi-intent, named")
    parser.add_argument("--big", type=int, default=10_000, help="size of the grown catalog")
    parser.add_argument("--learned-turns", type=int, default=1000,
                        help="turns of learned priors the grown catalog's latency is also timed with (0: not)")
    parser.add_argument("--latency-queries", type=int, default=500,
                        help="queries (a seeded sample) timed on the grown catalog")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "tooldisco-bench-cache"),
                        help="embedding disk cache for hybrid, and where the bfcl-eval wheel is kept")
    parser.add_argument("--bfcl-wheel", help="a bfcl-eval wheel on disk (else downloaded with pip)")
    parser.add_argument("--queries", type=int, default=0,
                        help="score at most this many queries of each set (a seeded sample; 0: all)")
    args = parser.parse_args()
    wanted = set(args.sets.split(","))

    def capped(labelled: LabelledSet) -> LabelledSet:
        if args.queries and len(labelled.queries) > args.queries:
            labelled.queries = random.Random(0).sample(labelled.queries, args.queries)
        return labelled

    base = capped(bfcl(Path(args.data)))
    sets: list[LabelledSet] = [base] if "bfcl" in wanted else []
    if "multi-turn" in wanted:
        sets.append(capped(bfcl_multi_turn(bfcl_wheel(Path(args.cache_dir), args.bfcl_wheel))))
    if "multi-intent" in wanted:
        sets.append(capped(multi_intent(base)))
    if "named" in wanted:
        sets += named_sets("BFCL", base.tools, _namespace_bare, lambda name: None)
        for style, title in (("claude", "MCP 500, mcp__s__t"), ("gemini", "MCP 500, mcp_s_t")):
            tools, parts = mcp_tools(style)
            sets += named_sets(title, tools, lambda n, p=parts: p[n][1], lambda n, p=parts: p[n][0])
        sets = [capped(s) if s.named else s for s in sets]
    big = grow_catalog(base.tools, args.big)
    sample = [q.text for q in random.Random(0).sample(base.queries, min(args.latency_queries, len(base.queries)))]

    backends = args.backends.split(",")
    results: dict[tuple[str, str], Result] = {}
    speed: dict[str, tuple[float, float, tuple[list[float], ...]]] = {}
    learned = learned_priors(base, big, args.learned_turns) if args.learned_turns else None
    with_learned: dict[str, tuple[list[float], list[float]]] = {}
    for backend in backends:
        clear_all()  # each backend builds its own indexes (and those it falls back to)
        searcher = make_searcher(backend, cache_dir=args.cache_dir)
        build_small = build_time(searcher, base.tools)
        for labelled in sets:
            build_time(searcher, labelled.tools)
            results[labelled.name, backend] = measure(searcher, labelled)
        build_big = build_time(searcher, big)
        speed[backend] = (build_small, build_big, latency(searcher, big, sample))
        if learned is not None:  # the same queries, the same catalog, with and without learned priors
            with_learned[backend] = paired_latency(searcher, with_priors(searcher, learned), big, sample)
        print(f"... {backend} done", file=sys.stderr)

    print(f"Limit {LIMIT}; latency at {len(base.tools)} tools over every BFCL query, at {len(big)} tools "
          f"over {len(sample)} sampled queries.\n")
    for labelled in (s for s in sets if not s.named):
        print(f"#### {labelled.name}: {len(labelled.tools)} tools, {len(labelled.queries)} queries\n")
        print("| backend | recall@1 | recall@5 | recall@10 | nDCG@10 | complete@10 | answered by |")
        print("|---|---|---|---|---|---|---|")
        for backend in backends:
            r = results[labelled.name, backend]
            answered = ", ".join(f"{name} {count}" for name, count in r.answered_by.most_common())
            answered += f", refused {r.refused}" if r.refused else ""
            print(f"| {backend} | {r.recall[1]:.3f} | {r.recall[5]:.3f} | {r.recall[10]:.3f} | {r.ndcg10:.3f} "
                  f"| {r.complete10:.3f} | {answered} |")
        print()
    named = [s for s in sets if s.named]
    if named:
        print("#### Named tools: share of queries with a named tool first and every named tool in the results\n")
        print("| set | queries | " + " | ".join(backends) + " |")
        print("|---|---" + "|---" * len(backends) + "|")
        for labelled in named:
            cells = " | ".join(f"{results[labelled.name, b].named_first:.3f}" for b in backends)
            print(f"| {labelled.name} | {len(labelled.queries)} | {cells} |")
        print()
    # The baseline: bm25, the plain lexical backend every other one builds on, in the same run.
    base_wall = speed["bm25"][2][0] if "bm25" in speed else None
    rows = []
    for backend in backends:
        small = results[base.name, backend].timings if (base.name, backend) in results else None
        build_small, build_big, (big_wall, big_cpu, big_key) = speed[backend]
        rows.append((backend, ms(small, 50) if small else "—", ms(small, 95) if small else "—",  # BFCL not measured
                     ms(big_wall, 50), ms(big_wall, 95),
                     ratio(percentile(big_wall, 50), percentile(base_wall, 50)) if base_wall else "n/a",
                     ms(big_cpu, 50), ms(big_cpu, 95), f"{ms(big_key, 50)} / {ms(big_key, 95)}",
                     f"{build_small:.2f}", f"{build_big:.2f}"))
    section("Latency (ms, index built; CPU: this process's CPU time; key: the catalog's key, made once per "
            "request; baseline: bm25 in the same run) and index build time (s)",
            ["backend", f"p50 {len(base.tools)}:", f"p95 {len(base.tools)}:", f"p50 {len(big)}:",
             f"p95 {len(big)}:", f"p50 {len(big)} / bm25:", f"CPU p50 {len(big)}:", f"CPU p95 {len(big)}:",
             f"key p50 / p95 {len(big)}:", f"build {len(base.tools)}:", f"build {len(big)}:"], rows)
    if with_learned:
        learned_latency_table(with_learned, len(big), args.learned_turns)


def learned_priors(base: LabelledSet, big: Sequence[Tool], turns: int) -> priors.Priors:
    """Priors learned from ``turns`` labelled queries (drawn from ``base``, seeded) whose model
    called the labelled tool, as the proxy learns them, over the grown catalog."""
    by_name = {t.name: t for t in big}
    rng = random.Random(1)
    knowledge = priors.Knowledge()
    usable = [q for q in base.queries if q.labels and set(q.labels) <= by_name.keys()]
    for _ in range(turns):
        q = rng.choice(usable)
        knowledge.learn(priors.lesson([(q.text, [])], sorted(q.labels), by_name))
    return priors.Priors(knowledge)


def learned_latency_table(with_learned: dict[str, tuple[list[float], list[float]]], size: int, turns: int) -> None:
    rows = []
    for backend, (plain, walls) in with_learned.items():
        rows.append((backend, ms(plain, 50), ms(plain, 95), ms(walls, 50), ms(walls, 95),
                     ratio(percentile(walls, 50), percentile(plain, 50)),
                     ratio(percentile(walls, 95), percentile(plain, 95))))
    section(f"Search latency at {size} tools with priors learned from {turns} turns (ms; baseline: the same "
            "backend without priors, same run, same queries, interleaved)",
            ["backend", "p50", "p95", "p50 learned", "p95 learned", "p50 ratio", "p95 ratio"], rows)


if __name__ == "__main__":
    main()
