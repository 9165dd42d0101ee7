"""Per-trace facts and set analyses: layers on the path, gaps, fan-out, retries, waterfalls and projected savings."""

from __future__ import annotations

from trace_helpers import span

from tailscope.records import Span
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.facts import trace_facts
from tailscope.trace.tree import build_tree

MS = 1_000_000


def agent_trace(tid: str, *, sequential: bool, llm_ms: int = 300) -> list[Span]:
    """root → agent → [llm, tool a, tool b, tool c, llm]; tools 100/200/150 ms, sequential or parallel."""
    t = 0
    spans = [span("r", None, 0, 0, "POST /chat", trace=tid, kind="SERVER", layer="gateway")]
    spans.append(span("ag", "r", 0, 0, "invoke_agent", trace=tid, layer="agent"))
    spans.append(span("l1", "ag", t, t + llm_ms * MS, "chat", trace=tid, layer="inference"))
    t += llm_ms * MS
    tools = [("a", "search_kb", 100), ("b", "get_order", 200), ("c", "get_user", 150)]
    if sequential:
        for sid, name, ms in tools:
            spans.append(span(sid, "ag", t, t + ms * MS, name, trace=tid, layer="agent"))
            t += ms * MS
    else:
        for sid, name, ms in tools:
            spans.append(span(sid, "ag", t, t + ms * MS, name, trace=tid, layer="agent"))
        t += 200 * MS
    spans.append(span("l2", "ag", t, t + llm_ms * MS, "chat", trace=tid, layer="inference"))
    t += llm_ms * MS
    spans[0] = span("r", None, 0, t, "POST /chat", trace=tid, kind="SERVER", layer="gateway")
    spans[1] = span("ag", "r", 0, t, "invoke_agent", trace=tid, layer="agent")
    return spans


def test_waterfall_found_with_its_exact_saving() -> None:
    f = trace_facts(build_tree(agent_trace("t", sequential=True)))
    assert len(f.waterfalls) == 1
    g = f.waterfalls[0]
    assert g.pattern == "invoke_agent → search_kb, get_order, get_user"
    assert g.window_ns == 450 * MS
    assert g.local_saving_ns == 250 * MS
    assert g.saving_ns == 250 * MS
    assert f.path_layer == {"inference": 600 * MS, "agent": 450 * MS}


def test_parallel_tools_are_not_a_waterfall_and_fanout_is_counted() -> None:
    f = trace_facts(build_tree(agent_trace("t", sequential=False)))
    assert f.waterfalls == []
    assert f.ops["invoke_agent"].fanout == 3


def test_model_call_between_tools_breaks_the_group() -> None:
    spans = [
        span("r", None, 0, 100, "root"),
        span("a", "r", 0, 20, "tool_a", layer="agent"),
        span("m", "r", 20, 50, "chat", layer="inference"),
        span("b", "r", 50, 70, "tool_b", layer="agent"),
    ]
    assert trace_facts(build_tree(spans)).waterfalls == []


def test_tool_with_a_model_call_inside_is_not_a_candidate() -> None:
    spans = [
        span("r", None, 0, 100, "root"),
        span("a", "r", 0, 40, "sub_agent", layer="agent"),
        span("a1", "a", 5, 35, "chat", layer="inference"),
        span("b", "r", 40, 70, "tool_b", layer="agent"),
        span("c", "r", 70, 90, "tool_c", layer="business"),
    ]
    [g] = trace_facts(build_tree(spans)).waterfalls
    assert g.member_ids == ("b", "c")
    assert g.saving_ns == 20


def test_waterfall_off_the_critical_path_saves_nothing() -> None:
    spans = [
        span("r", None, 0, 100, "root"),
        span("x", "r", 0, 100, "long_branch", layer="other"),
        span("g", "r", 0, 60, "group", layer="other"),
        span("a", "g", 0, 30, "tool_a", layer="agent"),
        span("b", "g", 30, 60, "tool_b", layer="agent"),
    ]
    [g] = trace_facts(build_tree(spans)).waterfalls
    assert g.local_saving_ns == 30
    assert g.saving_ns == 0


def test_retries_after_error_and_their_path_cost() -> None:
    spans = [
        span("r", None, 0, 100, "root"),
        span("a1", "r", 0, 30, "call_api", status="ERROR", layer="business"),
        span("a2", "r", 30, 60, "call_api", status="ERROR", layer="business"),
        span("a3", "r", 60, 90, "call_api", layer="business"),
    ]
    f = trace_facts(build_tree(spans))
    assert len(f.retries) == 1
    assert f.retries[0].attempts == 3
    assert f.retries[0].cost_ns == 60
    assert f.waterfalls == []  # retries are not independent work


def test_resend_count_marks_a_retry() -> None:
    spans = [
        span("r", None, 0, 100, "root"),
        span("a1", "r", 0, 30, "GET", layer="network"),
        span("a2", "r", 40, 60, "GET", layer="network", attributes={"http.request.resend_count": 1}),
    ]
    [r] = trace_facts(build_tree(spans)).retries
    assert r.attempts == 2
    assert r.cost_ns == 30


def test_gaps_self_time_and_gap_on_path() -> None:
    spans = [span("r", None, 0, 100, "root"), span("a", "r", 20, 50), span("b", "r", 40, 60)]
    f = trace_facts(build_tree(spans))
    root = f.ops["root"]
    assert root.self_ns == 60
    assert root.gap_ns == 60
    # path: r[0,40) b[40,60) r[60,100); a runs during [20,40) → gap on path = 40 - 20 + 40 = 60
    assert root.gap_path_ns == 60


def test_analyze_keys_and_projected_percentiles() -> None:
    facts = [trace_facts(build_tree(agent_trace(f"s{k}", sequential=True, llm_ms=300 + k))) for k in range(63)]
    facts += [trace_facts(build_tree(agent_trace(f"p{k}", sequential=False, llm_ms=300 + k))) for k in range(37)]
    out = analyze_facts(facts)
    assert set(out) >= {"traces", "root_ops", "layers", "operations", "waterfalls", "retries", "anomalies"}
    assert set(out["layers"]) >= {"median_bucket", "tail_bucket"}
    assert out["traces"]["count"] == 100
    [w] = out["waterfalls"]
    assert w["pattern"] == "invoke_agent → search_kb, get_order, get_user"
    assert w["traces"] == 63
    assert set(w) >= {"pattern", "traces", "projected_p50_ms", "projected_p99_ms"}
    # Sequential traces are 250 ms slower; parallel they would all be ≈ 1.05-1.12 s.
    assert w["projected_p99_ms"] < out["root_ops"]["POST /chat"]["p99"] - 200
    tail = out["layers"]["tail_bucket"]["composition"]
    assert tail["inference"]["share"] > 0.5
    assert out["operations"]["search_kb"]["spans"] == 63 + 37


def test_root_op_filter_and_anomalies() -> None:
    a = trace_facts(build_tree([span("r", None, 0, 10, "A", trace="1"), span("o", "gone", 1, 2, trace="1")]))
    b = trace_facts(build_tree([span("r", None, 0, 20, "B", trace="2")]))
    out = analyze_facts([a, b], root_op="A")
    assert out["traces"]["count"] == 1
    assert out["anomalies"]["orphans"] == {"count": 1, "traces": 1}


def test_concurrent_batch_after_a_sequential_run_is_not_absorbed() -> None:
    spans = [
        span("r", None, 0, 200, "root"),
        span("a", "r", 0, 20, "tool_a", layer="agent"),
        span("b", "r", 20, 40, "tool_b", layer="agent"),
        span("c", "r", 40, 80, "tool_c", layer="agent"),
        span("d", "r", 45, 90, "tool_d", layer="agent"),
    ]
    [g] = trace_facts(build_tree(spans)).waterfalls
    assert g.member_ids == ("a", "b")
