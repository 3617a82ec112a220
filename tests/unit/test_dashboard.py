"""The Grafana dashboard (docs/grafana/tooldisco.json) asks only for metrics and labels the proxy
exposes, and shows every metric it exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tooldisco.engine.metrics import Metrics

from tests.support import records as sample

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "tooldisco.json"
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
SCRAPE_LABELS = {"instance", "job"}  # what Prometheus adds to every series it scrapes
PREFIXES = ("tooldisco_", "gen_ai_")


class Store:
    available = True
    failures = 0


def exposed() -> dict[str, set[str]]:
    """Sample name -> its label names, in the exposition of a Metrics that saw every kind of record."""
    metrics = Metrics(Store(), "disk")
    for record in sample.sample_records():
        metrics.observe(record)
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            names.setdefault(s.name, set()).update(set(s.labels) - {"le"})
        names.setdefault(family.name, set())
    return names


def exprs(node: Any) -> Iterator[str]:
    """Every PromQL expression in the dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str) and "(" in value:
                yield value
            else:
                yield from exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def references(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names its selector uses) for each metric the expression reads: a name
    followed by a selector, the first argument of label_values(), or a name with our prefixes."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values, quoted
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables ($__rate_interval, ${api})
    found: list[tuple[str, set[str]]] = []
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", text):
        found.append((m.group(1), set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2)))))
    for m in re.finditer(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", text):
        found.append((m.group(1), {m.group(2)}))
    # Elsewhere, a name with our prefixes is a metric once label lists are taken out: selectors'
    # contents and grouping clauses (``by (le, gen_ai_token_type)``).
    bare = re.sub(r"\{[^}]*\}", "", text)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    for name in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        if name.startswith(PREFIXES):
            found.append((name, set()))
    return found


def test_the_dashboard_is_valid_json_with_a_prometheus_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tooldisco" and dashboard["panels"]
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "instance", "api"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


def test_every_metric_and_label_the_dashboard_reads_is_exposed():
    names = exposed()
    dashboard = json.loads(DASHBOARD.read_text())
    all_exprs = list(exprs(dashboard))
    assert len(all_exprs) > 20
    for expr in all_exprs:
        refs = references(expr)
        assert refs, f"no metric in {expr!r}"
        for name, labels in refs:
            assert name in names, f"{name} (in {expr!r}) is not exposed; exposed: {sorted(names)}"
            assert labels <= names[name] | SCRAPE_LABELS, f"{name} has no label {labels - names[name]} ({expr!r})"


def test_the_dashboard_shows_every_metric_family():
    read = {name for expr in exprs(json.loads(DASHBOARD.read_text())) for name, _ in references(expr)}
    families = {re.sub(r"(_total|_bucket|_sum|_count|_created)$", "", n) for n in exposed() if n.startswith(PREFIXES)}
    shown = {re.sub(r"(_total|_bucket|_sum|_count)$", "", n) for n in read}
    assert families - shown == set()


def test_by_clauses_group_on_labels_the_metric_has():
    names = exposed()
    for expr in exprs(json.loads(DASHBOARD.read_text())):
        for m in re.finditer(r"\bby\s*\(([^)]*)\)\s*\(\s*(?:rate|increase)\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", expr):
            labels = {label.strip() for label in m.group(1).split(",")} - {"le"}
            assert labels <= names[m.group(2)], (m.group(2), labels, expr)
