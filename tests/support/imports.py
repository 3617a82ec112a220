"""The project's import graph at file level, read from the source (no import runs).

Every ``import`` and ``from … import`` counts, wherever it stands: inside functions and under
``TYPE_CHECKING`` too, so a cycle cannot hide behind a lazy import. ``from pkg import name``
depends on ``pkg`` (its ``__init__`` runs) and on ``pkg.name`` when that is a module.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root`` (a sys.path entry)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def edges(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    mods = modules(root)
    out: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            out[name].update(c for c in candidates if c in mods and c != name)
    return out


def cycles(root: Path) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = edges(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in list(modules(root)):
        if v not in index:
            visit(v)
    return found


def local_imports(root: Path, project: tuple[str, ...] = ("tooldisco", "tool_discovery")) -> list[str]:
    """``file:line`` of each import of a project module inside a function, with no comment on
    its line or the one above saying why it cannot be at the top."""
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                if any(n.split(".")[0] in project for n in names) or (isinstance(node, ast.ImportFrom) and node.level):
                    said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                    if not said:
                        out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


if __name__ == "__main__":
    for component in cycles(Path(sys.argv[1] if len(sys.argv) > 1 else "addon")):
        print("CYCLE", component)
