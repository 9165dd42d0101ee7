"""Dependency evidence: "overlapped in N traces" and "parallel tool calls marked" verdicts, and their use by the
waterfall candidates of ``whatif --rank`` (pure, and through :func:`tailscope.whatif` on a stored set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trace_helpers import span

import tailscope
from tailscope.records import Span
from tailscope.store.spans import SpanStore
from tailscope.trace.dependency import Evidence, Marks, marks_from
from tailscope.trace.rank import rank, set_facts_with_marks
from tailscope.trace.tree import TraceTree, build_tree

MS = 1_000_000
TOOLS = ("a", "b", "c")


def _agent(trace: str, *, overlap: bool = False, parallel: bool = False, dur: int = 30) -> list[Span]:
    """An agent step (``agent``, layer agent) with tool calls a, b, c: one after another in that order, or all
    started together (``overlap``); ``parallel`` marks the step with ``gen_ai.request.parallel_tool_calls``."""
    attrs: dict[str, Any] = {"gen_ai.request.parallel_tool_calls": True} if parallel else {}
    kids = []
    t = MS
    for k, name in enumerate(TOOLS):
        start = MS if overlap else t
        kids.append(span(f"s{k}", "root", start, start + dur * MS, name, trace=trace, layer="agent"))
        t += (dur + 1) * MS
    end = max(s.end_ns for s in kids) + MS
    return [span("root", None, 0, end, "agent", trace=trace, layer="agent", attributes=attrs), *kids]


def _marks(spans: list[Span]) -> Marks:
    return marks_from((s.span_id, s.attributes, s.links) for s in spans)


def _set(n: int, **kw: Any) -> tuple[list[TraceTree], dict[str, Marks], Evidence]:
    trees, marks, ev = [], {}, Evidence()
    for k in range(n):
        spans = _agent(f"t{k}", overlap=bool(kw.get("overlap_every")) and k % kw["overlap_every"] == 0,
                       parallel=kw.get("parallel", False))  # fmt: skip
        tree = build_tree(spans)
        m = _marks(spans)
        trees.append(tree)
        if m:
            marks[tree.trace_id] = m
        ev.add(tree, m)
    return trees, marks, ev


def _parallelise(
    trees: list[TraceTree], marks: dict[str, Marks], ev: Evidence
) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = rank(trees, set_facts_with_marks(trees, marks), ev)
    par = [c for c in doc["candidates"] if c["kind"] == "parallelise"]
    assert len(par) == 1, doc["candidates"]
    return doc, par[0]


def test_overlapped_pairs_are_independent_and_the_waterfall_is_established() -> None:
    trees, marks, ev = _set(20, overlap_every=4)  # 5 of 20 traces ran the calls together, the rest in one order
    v = ev.verdict("agent", "b", "a")
    assert v.kind == "independent"
    assert v.reason == "a and b overlapped in 5 trace(s)"
    assert ev.verdict("agent", "a", "c").reason == "a and c overlapped in 5 trace(s)"
    doc, par = _parallelise(trees, marks, ev)
    assert sorted(par["operations"]) == list(TOOLS)
    assert par["established"]
    assert "sequential under agent in 75% of traces" in par["evidence"]
    assert "every pair overlapped in some traces" in par["evidence"]
    assert doc["greedy"]
    assert doc["greedy"][0]["change"] == par["change"] == '--parallel "a,b,c"'


def test_the_parallel_tool_calls_mark_makes_a_fixed_order_independent() -> None:
    trees, marks, ev = _set(20, parallel=True)  # always a, b, c in that order: only the mark tells
    assert marks
    assert all(m.parallel == frozenset({"root"}) for m in marks.values())
    v = ev.verdict("agent", "a", "b")
    assert v.kind == "independent"
    assert v.reason == "parallel tool calls marked in 20 trace(s)"
    doc, par = _parallelise(trees, marks, ev)
    assert par["established"]
    assert "marked as parallel tool calls" in par["evidence"]
    assert any(g["change"] == '--parallel "a,b,c"' for g in doc["greedy"])


def test_without_overlap_or_mark_the_same_order_is_only_assumed() -> None:
    trees, marks, ev = _set(20)
    assert not marks
    assert ev.verdict("agent", "a", "b").kind == "assumed"
    doc, par = _parallelise(trees, marks, ev)
    assert not par["established"]
    assert all("--parallel" not in g["change"] for g in doc["greedy"])


def test_overlap_is_told_before_the_parallel_mark() -> None:
    # the verdict order: overlap first (the calls did run together), whatever else is marked
    ev = Evidence()
    for k in range(4):
        spans = _agent(f"t{k}", overlap=k == 0, parallel=True)
        ev.add(build_tree(spans), _marks(spans))
    assert ev.verdict("agent", "a", "b").reason.endswith("overlapped in 1 trace(s)")


@pytest.mark.parametrize("value", [True, "true"])
def test_whatif_rank_on_a_store_reads_the_parallel_mark(tmp_path: Path, value: object) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    spans = []
    for k in range(30):
        for s in _agent(f"{k:032x}", dur=20 + k % 7):
            if s.span_id == "root":
                s = Span(s.trace_id, s.span_id, None, s.name, s.start_ns, s.end_ns, attributes={
                    "gen_ai.request.parallel_tool_calls": value}, layer="agent")  # fmt: skip
            spans.append(s)
    store.write("marked", spans)
    r = tailscope.whatif("marked", rank=True, store=store, resamples=0)
    par = [c for c in r.candidates if c["kind"] == "parallelise"]
    assert len(par) == 1
    assert par[0]["established"]
    assert "marked as parallel tool calls" in par[0]["evidence"]
    alone = tailscope.whatif("marked", parallel=["a,b,c"], store=store, resamples=0)
    assert par[0]["p95_saving_ms"] == pytest.approx(alone.saving["p95_ms"], abs=0.002)
    assert r.greedy[0]["change"] == '--parallel "a,b,c"'


def _model_then_tools(trace: str, *, marked: bool) -> list[Span]:
    """The GenAI layout: an agent step runs a model call that asks for tool calls (marked with
    ``gen_ai.request.parallel_tool_calls`` when ``marked``), then those tool calls as the model call's *siblings*,
    one after another, then the model call that answers (unmarked) and one more tool call after it."""
    attrs: dict[str, Any] = {"gen_ai.request.parallel_tool_calls": True} if marked else {}
    spans = [span("plan", "root", MS, 20 * MS, "chat", trace=trace, layer="inference", attributes=attrs)]
    t = 21 * MS
    for k, name in enumerate(TOOLS):
        spans.append(span(f"s{k}", "root", t, t + 30 * MS, name, trace=trace, layer="agent"))
        t += 31 * MS
    spans.append(span("answer", "root", t, t + 20 * MS, "chat answer", trace=trace, layer="inference"))
    t += 21 * MS
    spans.append(span("late", "root", t, t + 10 * MS, "notify", trace=trace, layer="agent"))
    return [span("root", None, 0, t + 11 * MS, "agent", trace=trace, layer="agent"), *spans]


def test_a_marked_model_call_makes_the_tool_calls_it_issued_independent() -> None:
    marked, plain = Evidence(), Evidence()
    for k in range(6):
        spans = _model_then_tools(f"t{k}", marked=True)
        marked.add(build_tree(spans), _marks(spans))
        plain.add(build_tree(_model_then_tools(f"t{k}", marked=False)))
    v = marked.verdict("agent", "a", "c")
    assert v.kind == "independent"
    assert v.reason == "parallel tool calls marked in 6 trace(s)"
    assert plain.verdict("agent", "a", "c").kind == "assumed"
    # the mark covers the calls that model call issued, not the model call itself nor calls after the next one
    assert marked.verdict("agent", "chat", "a").kind == "assumed"
    assert marked.verdict("agent", "a", "notify").kind == "assumed"


def test_rank_takes_the_tool_calls_a_marked_model_call_issued() -> None:
    trees, marks, ev = [], {}, Evidence()
    for k in range(20):
        spans = _model_then_tools(f"t{k}", marked=True)
        tree = build_tree(spans)
        trees.append(tree)
        marks[tree.trace_id] = _marks(spans)
        ev.add(tree, marks[tree.trace_id])
    doc = rank(trees, set_facts_with_marks(trees, marks), ev)
    par = [c for c in doc["candidates"] if c["kind"] == "parallelise"]
    assert [sorted(c["operations"]) for c in par] == [list(TOOLS)]
    assert par[0]["established"]
    assert "marked as parallel tool calls" in par[0]["evidence"]
    assert any(g["change"] == '--parallel "a,b,c"' for g in doc["greedy"])


def test_a_waterfall_run_twice_in_a_trace_counts_once() -> None:
    trees, ev = [], Evidence()
    for k in range(10):
        first = _agent(f"t{k}", overlap=k == 0)
        second = [  # the same step again, later, under a second span of the same name
            span(f"{s.span_id}2", None if s.parent_id is None else "root2", s.start_ns + 500 * MS, s.end_ns + 500 * MS,
                 s.name, trace=f"t{k}", layer="agent")
            for s in _agent(f"t{k}", overlap=k == 0)
        ]  # fmt: skip
        top = span("top", None, 0, 700 * MS, "session", trace=f"t{k}", layer="agent")
        spans = [top, *(_under(s, "top") for s in first + second)]
        tree = build_tree(spans)
        trees.append(tree)
        ev.add(tree)
    doc = rank(trees, set_facts_with_marks(trees, {}), ev)
    par = [c for c in doc["candidates"] if c["kind"] == "parallelise" and sorted(c["operations"]) == list(TOOLS)]
    assert len(par) == 1
    assert "sequential under agent in 90% of traces" in par[0]["evidence"]  # not 180 %


def _under(s: Span, top: str) -> Span:
    if s.parent_id is not None:
        return s
    return Span(s.trace_id, s.span_id, top, s.name, s.start_ns, s.end_ns, attributes=s.attributes, layer=s.layer)
