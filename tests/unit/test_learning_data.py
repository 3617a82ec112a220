"""scripts/make_learning_data.py's pure parts (no download): the LEARN/EVAL split, BFCL's schema
types, tau2's tools read from source; and bench_learning.py's schedule."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import bench_learning  # noqa: E402
import make_learning_data as mld  # noqa: E402


def test_split_keeps_every_eval_phrasing_out_of_learn() -> None:
    pairs = [("a", f"Phrasing number {i}") for i in range(10)]
    pairs += [("a", "phrasing NUMBER 3!"), ("b", "one"), ("b", "two"), ("c", "x"), ("c", "y"), ("c", "z")]
    pairs += [("c", "shared text"), ("b", "Shared text")]  # labelled with two tools: asks for neither alone
    learn, evaluate = mld.split(pairs, min_phrasings=3, learn_share=0.6, seed=0)
    assert {q["tool"] for q in learn} == {q["tool"] for q in evaluate} == {"a", "c"}  # b: two phrasings left
    assert not {mld.normalised(q["query"]) for q in learn} & {mld.normalised(q["query"]) for q in evaluate}
    assert sum(q["tool"] == "a" for q in learn) == 6 and sum(q["tool"] == "a" for q in evaluate) == 4
    assert "shared text" not in {mld.normalised(q["query"]) for q in learn + evaluate}
    assert mld.split(pairs, 3, 0.6, 0) == (learn, evaluate)  # seeded


def test_bfcl_types_become_json_schema() -> None:
    tool = mld.bfcl_tool({"name": "f", "description": "d", "parameters": {
        "type": "dict", "required": ["x"],
        "properties": {"x": {"type": "float"}, "y": {"type": "tuple", "items": {"type": "any"}}}}})
    assert tool == {"name": "f", "description": "d", "input_schema": {
        "type": "object", "required": ["x"], "properties": {"x": {"type": "number"}, "y": {"type": "array", "items": {}}}}}


def test_tau2_tools_are_read_from_their_source() -> None:
    source = '''
class Tools:
    @is_tool(ToolType.WRITE)
    def cancel_order(self, order_id: str, items: List[str], reason: str = "") -> str:
        """Cancel an order.
        Only pending ones.

        Args:
            order_id: The order id, such as '#W0000000'.
            items: Items to cancel,
                all of them by default.
            reason: Why.

        Returns:
            The order.
        """

    def _helper(self, x: int) -> int:
        """Not a tool."""
'''
    tools = mld.tau2_tools(source, "retail")
    tool, kind = tools["cancel_order"]
    assert list(tools) == ["cancel_order"] and kind == "WRITE"
    assert tool["name"] == "retail__cancel_order" and tool["description"] == "Cancel an order. Only pending ones."
    assert tool["input_schema"]["required"] == ["order_id", "items"]
    props = tool["input_schema"]["properties"]
    assert props["items"] == {"type": "array", "items": {"type": "string"},
                              "description": "Items to cancel, all of them by default."}
    assert props["order_id"]["description"] == "The order id, such as '#W0000000'."


def test_schedule_plays_every_learn_phrasing_evenly() -> None:
    learn = [("t", f"q{i}") for i in range(7)]
    plan = bench_learning.schedule(learn, 30, seed=1)
    counts = {q: sum(p == (t, q) for p in plan) for t, q in learn}
    assert len(plan) == 30 and set(counts.values()) <= {4, 5}
