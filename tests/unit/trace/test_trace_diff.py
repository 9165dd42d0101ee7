"""The diff names the cause of a P99 change — the example from practice."""

from __future__ import annotations

import random

from trace_helpers import span

from tailscope.records import Span
from tailscope.trace.diff import diff_sets
from tailscope.trace.facts import trace_facts
from tailscope.trace.tree import build_tree

MS = 1_000_000


def trace(tid: str, leaf_ms: float, branch_ms: float) -> list[Span]:
    """POST /chat → {leaf ``rank_docs`` ‖ branch ``enrich`` → [fetch_profile, score]} run in parallel."""
    leaf = int(leaf_ms * MS)
    b1 = int(branch_ms * 0.6 * MS)
    b2 = int(branch_ms * 0.4 * MS)
    end = max(leaf, b1 + b2) + 5 * MS
    return [
        span("r", None, 0, end, "POST /chat", trace=tid, kind="SERVER", layer="gateway"),
        span("leaf", "r", 1 * MS, 1 * MS + leaf, "rank_docs", trace=tid, layer="retrieval"),
        span("br", "r", 1 * MS, 1 * MS + b1 + b2, "enrich", trace=tid, layer="agent"),
        span("b1", "br", 1 * MS, 1 * MS + b1, "fetch_profile", trace=tid, layer="business"),
        span("b2", "br", 1 * MS + b1, 1 * MS + b1 + b2, "score", trace=tid, layer="business"),
    ]


def test_faster_leaf_slower_sibling_branch_diff_names_the_branch() -> None:
    rng = random.Random(3)
    before = [
        trace_facts(build_tree(trace(f"b{k}", 2100 * rng.uniform(0.8, 1.2), 1500 * rng.uniform(0.8, 1.2))))
        for k in range(400)
    ]
    after = [
        trace_facts(build_tree(trace(f"a{k}", 900 * rng.uniform(0.8, 1.2), 2400 * rng.uniform(0.8, 1.2))))
        for k in range(400)
    ]
    out = diff_sets(before, after)
    d = out["root_ops"]["POST /chat"]
    assert d["delta_p99_ms"] > 0  # the leaf got 1.2 s faster, yet P99 rose
    top = d["explanations"][0]
    assert top["branch"] == "enrich"
    assert top["op"] == "enrich"
    assert top["kind"] == "became_critical"
    kinds = {e["op"]: e["kind"] for e in d["explanations"]}
    assert kinds["rank_docs"] in ("faster_on_path", "faster_with_slack")
    # the leaf's speed-up is not presented as a cause of the rise: it ranks after every positive contribution
    ranks = {e["op"]: k for k, e in enumerate(d["explanations"])}
    assert ranks["rank_docs"] > ranks["fetch_profile"]
    assert ranks["rank_docs"] > ranks["score"]


def test_faster_with_slack_when_the_leaf_was_never_critical() -> None:
    rng = random.Random(5)
    before = [trace_facts(build_tree(trace(f"b{k}", 1000 * rng.uniform(0.9, 1.1), 2000))) for k in range(100)]
    after = [trace_facts(build_tree(trace(f"a{k}", 400 * rng.uniform(0.9, 1.1), 2000))) for k in range(100)]
    d = diff_sets(before, after)["root_ops"]["POST /chat"]
    kinds = {e["op"]: e["kind"] for e in d["explanations"]}
    assert kinds["rank_docs"] == "faster_with_slack"
    assert abs(d["delta_p99_ms"]) < 1


def test_unmatched_root_operations_are_listed() -> None:
    a = trace_facts(build_tree([span("r", None, 0, 10, "A", trace="1")]))
    b = trace_facts(build_tree([span("r", None, 0, 10, "B", trace="2")]))
    out = diff_sets([a], [b])
    assert out["root_ops"] == {}
    assert out["only_before"] == ["A"]
    assert out["only_after"] == ["B"]
