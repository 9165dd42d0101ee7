"""Dependency evidence, the waterfall finder's use of it, and ``whatif --rank`` on a stored set."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_helpers import span
from whatif_truth import trace_sets

import tailscope
from tailscope.errors import ConfigError
from tailscope.records import Span
from tailscope.store.spans import SpanStore
from tailscope.trace.dependency import Evidence, marks_from
from tailscope.trace.facts import trace_facts
from tailscope.trace.tree import build_tree

MS = 1_000_000


def test_marks_from_links_and_tool_call_ids() -> None:
    m = marks_from(
        [
            ("s1", {"gen_ai.tool.call.id": "call_abc123"}, None),
            ("s2", {"gen_ai.tool.call.id": "call_def456"}, None),
            ("r", {"input.value": '[{"tool_call_id": "call_abc123"}]'}, [("t", "s2")]),
            ("p", {"gen_ai.request.parallel_tool_calls": True}, None),
        ]
    )
    assert m.consumes == {"r": frozenset({"s1", "s2"})}
    assert m.parallel == frozenset({"p"})


def _agent(order: list[str], *, trace: str, rerank_links: bool) -> list[Span]:
    spans = [span("root", None, 0, 100 * MS, "agent", trace=trace)]
    t = 0
    for k, name in enumerate(order):
        spans.append(span(f"s{k}", "root", t, t + 20 * MS, name, trace=trace, layer="agent"))
        t += 20 * MS
    spans.append(span("rr", "root", t, t + 10 * MS, "rerank", trace=trace, layer="agent"))
    if rerank_links:
        rr = spans[-1]
        links = tuple((trace, f"s{k}") for k in range(len(order)))
        spans[-1] = Span(trace, "rr", "root", "rerank", rr.start_ns, rr.end_ns, links=links, layer="agent")
    return spans


def test_evidence_verdicts() -> None:
    ev = Evidence([("x", "y")])
    for k, order in enumerate([["a", "b", "c"], ["b", "a", "c"], ["c", "b", "a"]]):
        spans = _agent(order, trace=f"t{k}", rerank_links=True)
        ev.add(build_tree(spans), marks_from((s.span_id, s.attributes, s.links) for s in spans))
    assert ev.verdict("agent", "a", "b").kind == "independent"
    assert "order varies" in ev.verdict("agent", "a", "b").reason
    assert ev.verdict("agent", "a", "rerank").kind == "dependent"
    assert ev.verdict("agent", "x", "y").kind == "independent"  # the user said so
    kept, dropped = ev.split("agent", ["b", "a", "c", "rerank"])
    assert kept == ["b", "a", "c"]
    assert [op for op, _ in dropped] == ["rerank"]


def test_waterfall_saving_never_counts_a_consumer() -> None:
    spans = _agent(["a", "b", "c"], trace="t", rerank_links=True)
    tree = build_tree(spans)
    plain = trace_facts(tree).waterfalls
    marked = trace_facts(tree, consumes=marks_from((s.span_id, s.attributes, s.links) for s in spans).by_index(tree))
    assert [len(g.member_ids) for g in plain] == [4]  # without evidence, rerank counted as parallelisable
    assert [g.member_ids for g in marked.waterfalls] == [("s0", "s1", "s2")]
    assert marked.waterfalls[0].saving_ns == 40 * MS


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SpanStore:
    before, _ = trace_sets(400, "")
    s = SpanStore(tmp_path_factory.mktemp("wi") / "s.duckdb")
    s.write("case", [sp for t in before for sp in t])
    return s


def test_rank_proposes_the_searches_never_the_rerank(store: SpanStore) -> None:
    result = tailscope.whatif("case", rank=True, store=store, resamples=0)
    kinds = {c["kind"] for c in result.candidates}
    assert "parallelise" in kinds
    par = next(c for c in result.candidates if c["kind"] == "parallelise")
    assert sorted(par["operations"]) == ["search_a", "search_b", "search_c"]
    assert "order varies" in par["evidence"]
    assert "rerank" in par["evidence"]
    for c in result.candidates:
        if c["kind"] == "parallelise":
            assert "rerank" not in c["operations"]
    assert par["p95_saving_ms"] > 0
    assert all(set(c) >= {"kind", "operations", "change", "p95_after_ms", "p95_saving_ms", "evidence"}
               for c in result.candidates)  # fmt: skip
    savings = [c["p95_saving_ms"] for c in result.candidates]
    assert savings == sorted(savings, reverse=True)
    assert result.greedy
    assert result.greedy[0]["p95_saving_ms"] == max(savings)
    cumulative = [g["p95_saving_ms"] for g in result.greedy]
    assert cumulative == sorted(cumulative)


def test_whatif_on_a_store_and_the_dependency_warning(store: SpanStore) -> None:
    r = tailscope.whatif("case", set_duration=["auth=30ms"], parallel=["search_a,search_b,search_c,rerank"],
                         store=store, resamples=50)  # fmt: skip
    assert r.traces == 400
    assert r.after["p95_ms"] < r.before["p95_ms"]
    assert r.before["p95_low_ms"] <= r.before["p95_ms"] <= r.before["p95_high_ms"]
    assert any("rerank" in w and "consumes" in w for w in r.warnings)
    doc = r.to_dict()
    assert {"before", "after", "changes", "traces", "critical_path"} <= set(doc)
    assert doc["changes"][0]["flag"] == '--set-duration "auth=30ms"'


def test_whatif_names_the_bad_flag(store: SpanStore) -> None:
    with pytest.raises(ConfigError, match=r'^--scale .*expected "OP=0.6"'):
        tailscope.whatif("case", scale=["llm"], store=store)
    with pytest.raises(ConfigError, match="at least one change"):
        tailscope.whatif("case", store=store)


def test_whatif_on_a_file(tmp_path: Path) -> None:
    import json

    from tailscope.trace.demo import to_otlp_json

    before, _ = trace_sets(50, "")
    path = tmp_path / "t.otlp.json"
    path.write_text(json.dumps(to_otlp_json([s for t in before for s in t])))
    r = tailscope.whatif(path, remove=["memory fetch"], resamples=0)
    assert r.traces == 50
    assert r.critical_path["changed_share"] > 0  # memory fetch was often the critical branch


def test_analyze_waterfalls_leave_the_consumer_out(store: SpanStore, tmp_path: Path) -> None:
    import json

    from tailscope.trace.demo import to_otlp_json

    stored = tailscope.analyze_traces("case", store=store)
    before, _ = trace_sets(400, "")
    path = tmp_path / "t.otlp.json"
    path.write_text(json.dumps(to_otlp_json([s for t in before for s in t])))
    from_file = tailscope.analyze_traces(path)
    for result in (stored, from_file):
        patterns = [w["pattern"] for w in result.waterfalls]
        assert patterns
        assert all("rerank" not in p for p in patterns), patterns


def test_html_view(store: SpanStore) -> None:
    from tailscope.report.html_whatif import render_whatif_page

    r = tailscope.whatif("case", scale=["llm answer=0.5"], rank=True, store=store, resamples=20)
    page = render_whatif_page(r.to_dict())
    assert page.count("<polyline") == 2  # before and after CDFs
    assert "Ranked fixes" in page
    assert "--parallel &#34;search_a,search_b,search_c&#34;" in page
    assert "<script" not in page
    dist = r.to_dict()["distribution"]
    assert len(dist["before_ms"]) == len(dist["after_ms"]) == 101
    assert dist["after_ms"] == sorted(dist["after_ms"])


def test_inputs_of_one_join_are_independent_and_mere_order_is_only_assumed() -> None:
    joined, plain = Evidence(), Evidence()
    for k in range(5):
        spans = _agent(["a", "b", "c"], trace=f"t{k}", rerank_links=True)  # always the same order
        joined.add(build_tree(spans), marks_from((s.span_id, s.attributes, s.links) for s in spans))
        plain.add(build_tree(_agent(["a", "b", "c"], trace=f"t{k}", rerank_links=False)))
    v = joined.verdict("agent", "a", "b")
    assert v.kind == "independent"
    assert "consumed together" in v.reason
    assert joined.verdict("agent", "a", "rerank").kind == "dependent"
    assert plain.verdict("agent", "a", "b").kind == "assumed"


def test_an_assumed_parallelisation_is_listed_but_not_taken(tmp_path: Path) -> None:
    from tailscope.trace.rank import rank, set_facts_with_marks

    trees = []
    ev = Evidence()
    for k in range(40):
        spans = _agent(["a", "b", "c"], trace=f"t{k}", rerank_links=False)
        tree = build_tree(spans)
        trees.append(tree)
        ev.add(tree)
    doc = rank(trees, set_facts_with_marks(trees, {}), ev)
    par = [c for c in doc["candidates"] if c["kind"] == "parallelise"]
    assert par
    assert not par[0]["established"]
    assert "--independent" in par[0]["evidence"]
    assert all("--parallel" not in g["change"] for g in doc["greedy"])
    confirmed = Evidence([("a", "b", "c", "rerank")])
    for tree in trees:
        confirmed.add(tree)
    doc = rank(trees, set_facts_with_marks(trees, {}), confirmed)
    assert any("--parallel" in g["change"] for g in doc["greedy"])


@pytest.mark.parametrize("marks", ["links", "call ids", "none"])
def test_rank_never_proposes_the_rerank_whatever_marks_it_carries(tmp_path: Path, marks: str) -> None:
    """The done-when case with less evidence: three searches in varying order and a rerank that always waits for
    them, the rerank marked as consuming the searches by span links only, by tool call ids only, or not at all. The
    searches are proposed (their order varies); the rerank is in no proposed set — dependent when marked, only
    assumed (and named as left out) when not."""
    import dataclasses

    before, _ = trace_sets(300, "")
    spans = []
    for t in before:
        for s in t:
            if s.name == "rerank":
                attrs = s.attributes if marks == "call ids" else {k: v for k, v in s.attributes.items()
                                                                  if k != "input.value"}  # fmt: skip
                s = dataclasses.replace(s, links=s.links if marks == "links" else (), attributes=attrs)
            spans.append(s)
    rerank = [s for s in spans if s.name == "rerank"]
    assert all(bool(s.links) == (marks == "links") for s in rerank)
    assert all(("input.value" in s.attributes) == (marks == "call ids") for s in rerank)
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", spans)
    result = tailscope.whatif("case", rank=True, store=store, resamples=0)
    par = [c for c in result.candidates if c["kind"] == "parallelise"]
    assert [sorted(c["operations"]) for c in par] == [["search_a", "search_b", "search_c"]]
    assert par[0]["p95_saving_ms"] > 0
    assert "order varies" in par[0]["evidence"]
    if marks == "none":
        assert "rerank left out: only assumed independent" in par[0]["evidence"]
    else:
        assert "rerank kept after: rerank always starts after" in par[0]["evidence"]
        assert "consumes its output" in par[0]["evidence"]
    assert all("rerank" not in c["operations"] for c in result.candidates if c["kind"] == "parallelise")
    assert all("rerank" not in g["change"] for g in result.greedy if "--parallel" in g["change"])
    assert any(g["change"] == '--parallel "search_a,search_b,search_c"' for g in result.greedy)
