"""Re-timing a span tree under changes (hand-built trees with known answers)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace_oracle import messy_traces
from trace_helpers import span

from tailscope.records import Span
from tailscope.trace.changes import Change, parse_change, parse_duration_ns
from tailscope.trace.tree import build_tree, tree_from_rows
from tailscope.trace.whatif import Plan, project, project_trace, retime

MS = 1_000_000


def s(sid: str, parent: str | None, start: float, end: float, **kw: object) -> Span:
    return span(sid, parent, int(start * MS), int(end * MS), **kw)  # type: ignore[arg-type]


def _tree() -> list[Span]:
    # root 0..100: auth 0..20; A 22..40; B 41..60 after A; C 60..90 and D 60..70 concurrent; 10 ms of root tail.
    return [s("root", None, 0, 100), s("auth", "root", 0, 20), s("A", "root", 22, 40), s("B", "root", 41, 60),
            s("C", "root", 60, 90), s("D", "root", 60, 70)]  # fmt: skip


def after_ms(spans: list[Span], *changes: tuple[str, str]) -> float:
    o = project_trace(build_tree(spans), Plan([parse_change(k, v) for k, v in changes]))
    assert o is not None
    return o.after_ns / MS


def test_no_change_keeps_every_time_exactly() -> None:
    tree = build_tree(_tree())
    rt = retime(tree, Plan([parse_change("scale", "unrelated=0.5")]))
    assert rt.starts == [float(x) for x in tree.starts]
    assert rt.ends == [float(x) for x in tree.ends]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([("set-duration", "auth=5ms")], 85.0),  # everything after auth moves 15 ms earlier
        ([("parallel", "A,B")], 81.0),  # B starts with A; C waits for the latest of them (B, 19 ms)
        ([("scale", "C=0.5")], 85.0),  # C 15 ms, D 10 ms concurrent: C still ends last
        ([("scale", "C=0.2")], 80.0),  # C 6 ms: D (10 ms) becomes the last child
        ([("remove", "B")], 81.0),  # B takes no time; the gaps around it stay
        ([("timeout", "C=10ms:1ms")], 81.0),  # C cut at 10 ms, plus a 1 ms fallback; D (10 ms) ties
        ([("parallel-children", "root")], 40.0),  # all children start at 0: longest is C (30) + 10 tail
        ([("set-duration", "auth=5ms"), ("parallel", "A,B")], 66.0),  # combined
        ([("scale", "root=0.5")], 50.0),  # scaling a parent scales its whole subtree
        ([("cache", "A=1.0:1ms")], 83.0),  # every A hits: 1 ms instead of 18
        ([("cache", "A=0:1ms")], 100.0),
    ],
)
def test_retiming_known_answers(changes: list[tuple[str, str]], expected: float) -> None:
    assert after_ms(_tree(), *changes) == pytest.approx(expected)


def test_nested_children_move_with_their_parent_and_keep_waits() -> None:
    spans = [
        s("root", None, 0, 100),
        s("slow", "root", 0, 50),
        s("agent", "root", 50, 100),
        s("llm", "agent", 55, 70),  # 5 ms of agent self time before it
        s("tool", "agent", 72, 95),  # waited for llm, 2 ms gap
    ]
    tree = build_tree(spans)
    rt = retime(tree, Plan([parse_change("set-duration", "slow=10ms")]))
    idx = {sid: k for k, sid in enumerate(tree.span_ids)}
    assert rt.starts[idx["agent"]] == 10 * MS
    assert rt.starts[idx["llm"]] == 15 * MS
    assert rt.starts[idx["tool"]] == 32 * MS
    assert rt.ends[idx["root"]] == 60 * MS


def test_leaf_faster_moves_the_critical_path_to_the_other_branch() -> None:
    spans = [s("root", None, 0, 100), s("kb", "root", 0, 100), s("web", "root", 0, 90)]
    o = project_trace(build_tree(spans), Plan([parse_change("scale", "kb=0.5")]))
    assert o is not None
    assert (o.before_path, o.after_path) == ("kb", "web")
    assert o.after_ns == 90 * MS  # the tail only drops to the other branch
    summary = project([build_tree(spans)], [parse_change("scale", "kb=0.5")]).summary(resamples=0)
    assert summary["critical_path"]["changed_share"] == 1.0
    assert summary["critical_path"]["moves"][0]["to"] == "web"


def test_retry_cap_drops_attempts_after_the_first_n() -> None:
    spans = [
        s("root", None, 0, 100),
        s("a1", "root", 0, 30, name="llm", status="ERROR"),
        s("a2", "root", 30, 60, name="llm", status="ERROR"),
        s("a3", "root", 60, 90, name="llm"),
    ]
    assert after_ms(spans, ("cap-retries", "llm=1")) == pytest.approx(40.0)
    assert after_ms(spans, ("cap-retries", "llm=2")) == pytest.approx(70.0)
    assert after_ms(spans, ("cap-retries", "llm=5")) == pytest.approx(100.0)


def test_non_blocking_children_do_not_hold_the_parent() -> None:
    spans = [s("root", None, 0, 50), s("work", "root", 0, 40), s("log", "root", 40, 200, kind="CONSUMER")]
    assert after_ms(spans, ("scale", "work=0.5")) == pytest.approx(30.0)


def test_cache_hits_are_seeded_and_near_the_rate() -> None:
    trees = [build_tree([s("root", None, 0, 100, trace=f"t{k}"), s("q", "root", 0, 100, trace=f"t{k}")])
             for k in range(2000)]  # fmt: skip
    change = parse_change("cache", "q=0.3:0ms")
    a = project(trees, [change], seed=1).outcomes
    b = project(trees, [change], seed=1).outcomes
    assert [o.after_ns for o in a] == [o.after_ns for o in b]
    hits = sum(o.after_ns == 0 for o in a) / len(a)
    assert 0.25 < hits < 0.35


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("set-duration", "auth=30ms", Change("set-duration", ("auth",), 30e6, text="auth=30ms")),
        ("scale", "llm = 0.6", Change("scale", ("llm",), 0.6, text="llm = 0.6")),
        ("parallel", "a, b,c", Change("parallel", ("a", "b", "c"), text="a, b,c")),
        ("cache", "kb=40%:2ms", Change("cache", ("kb",), 0.4, 2e6, text="kb=40%:2ms")),
        ("timeout", "kb=3s:200ms", Change("timeout", ("kb",), 3e9, 2e8, text="kb=3s:200ms")),
        ("cap-retries", "POST /x=1", Change("cap-retries", ("POST /x",), 1.0, text="POST /x=1")),
    ],
)
def test_parse_change(kind: str, text: str, expected: Change) -> None:
    assert parse_change(kind, text) == expected


@pytest.mark.parametrize(
    ("kind", "text"),
    [("set-duration", "auth"), ("scale", "x=-1"), ("parallel", "a,,b"), ("cache", "x=1.5:1ms"), ("cache", "x=0.5"),
     ("cap-retries", "x=0"), ("timeout", "x=soon"), ("remove", "")],
)  # fmt: skip
def test_bad_change_names_the_flag_and_the_form(kind: str, text: str) -> None:
    with pytest.raises(ValueError, match=rf"^--{kind} .*expected"):
        parse_change(kind, text)


def test_durations() -> None:
    assert parse_duration_ns("30ms") == 30e6
    assert parse_duration_ns("1.5s") == 1.5e9
    assert parse_duration_ns("250") == 250e6
    assert parse_duration_ns("200us") == 200e3


def test_glob_operations() -> None:
    assert after_ms(_tree(), ("set-duration", "[AB]=1ms")) == pytest.approx(100 - 18 - 19 + 2)


def test_parallel_of_one_operation_runs_its_repeated_siblings_together() -> None:
    spans = [s("root", None, 0, 100), s("q1", "root", 0, 30, name="q"), s("q2", "root", 30, 60, name="q"),
             s("q3", "root", 60, 90, name="q")]  # fmt: skip
    assert after_ms(spans, ("parallel", "q")) == pytest.approx(40.0)


_PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPS
@given(messy_traces(), st.data())
def test_messy_trees_keep_their_times_without_a_change_and_never_break(rows: list, data: st.DataObject) -> None:
    tree = tree_from_rows(rows)
    same = retime(tree, Plan([parse_change("scale", "no such operation=0.5")]))
    assert same.starts == [float(x) for x in tree.starts]
    assert same.ends == [float(x) for x in tree.ends]
    names = sorted(set(tree.names))
    a, b = data.draw(st.sampled_from(names)), data.draw(st.sampled_from(names))
    changes = [
        parse_change("scale", f"{a}={data.draw(st.floats(0, 3)):.3f}"),
        parse_change("parallel", f"{a},{b}"),
        parse_change("timeout", f"{b}=5ns:1ns"),
        parse_change("cache", f"{b}=0.5:1ns"),
        parse_change("cap-retries", f"{a}=1"),
        parse_change("parallel-children", b),
    ]
    picked = data.draw(st.lists(st.sampled_from(changes), max_size=4))
    o = project_trace(tree, Plan(picked))
    if o is not None:
        assert o.after_ns >= 0
        assert o.after_ns < float("inf")


@_PROPS
@given(messy_traces(), st.data())
def test_faster_or_removed_leaves_never_lengthen_a_trace(rows: list, data: st.DataObject) -> None:
    tree = tree_from_rows(rows)
    leaves = sorted({tree.names[i] for i, kids in enumerate(tree.children) if not kids} - {
        tree.names[i] for i, kids in enumerate(tree.children) if kids})  # fmt: skip
    if not leaves or tree.primary < 0:
        return
    op = data.draw(st.sampled_from(leaves))
    change = data.draw(st.sampled_from([f"scale:{op}=0.5", f"scale:{op}=0", f"remove:{op}"]))
    kind, _, text = change.partition(":")
    o = project_trace(tree, Plan([parse_change(kind, text)]))
    assert o is not None
    assert o.after_ns <= o.before_ns
