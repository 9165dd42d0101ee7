"""Critical paths on hand-built trees (default and jaeger policies) and properties of the default policy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import span

from tailscope.records import Span
from tailscope.trace.critical_path import critical_path
from tailscope.trace.tree import build_tree


def segs(spans: list[Span], policy: str = "default", **kw: bool) -> list[tuple[str, int, int]]:
    cp = critical_path(build_tree(spans), policy=policy, **kw)
    return [(s.span_id, s.start_ns, s.end_ns) for s in cp.segments]


def test_sequential_children_are_all_on_the_path_with_parent_gaps() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 10, 40), span("b", "r", 50, 90)]
    assert segs(spans) == [("r", 0, 10), ("a", 10, 40), ("r", 40, 50), ("b", 50, 90), ("r", 90, 100)]
    cp = critical_path(build_tree(spans))
    assert cp.exclusive_ns == {"r": 30, "a": 30, "b": 40}
    assert cp.total_ns == 100


def test_parallel_children_only_the_last_ending_one_is_on_the_path() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 10, 60), span("b", "r", 10, 90), span("c", "r", 20, 30)]
    assert segs(spans) == [("r", 0, 10), ("b", 10, 90), ("r", 90, 100)]


def test_touching_siblings_both_stay_on_the_path_but_not_in_jaeger() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 0, 50), span("b", "r", 50, 100)]
    assert segs(spans) == [("a", 0, 50), ("b", 50, 100)]
    # Jaeger needs a sibling to end strictly before the returning child's start.
    assert segs(spans, "jaeger") == [("r", 0, 50), ("b", 50, 100)]


def test_overlapping_siblings_the_earlier_one_is_skipped() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 0, 60), span("b", "r", 50, 100)]
    assert segs(spans) == [("r", 0, 50), ("b", 50, 100)]


def test_overflowing_child_is_clipped_and_reported() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 80, 130), span("z", "r", -20, 10)]
    cp = critical_path(build_tree(spans))
    assert [(s.span_id, s.start_ns, s.end_ns) for s in cp.segments] == [
        ("z", 0, 10),
        ("r", 10, 80),
        ("a", 80, 100),
    ]
    assert set(cp.clipped) == {"a", "z"}
    assert cp.total_ns == 100


def test_child_entirely_outside_is_ignored_and_reported() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 120, 150), span("b", "r", 10, 20)]
    cp = critical_path(build_tree(spans))
    assert cp.ignored == ("a",)
    assert [s.span_id for s in cp.segments] == ["r", "b", "r"]


def test_nested_recursion_clips_to_the_clipped_parent() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 50, 150), span("a1", "a", 90, 140)]
    assert segs(spans) == [("r", 0, 50), ("a", 50, 90), ("a1", 90, 100)]


def test_async_children_do_not_block_unless_asked() -> None:
    spans = [
        span("r", None, 0, 100),
        span("a", "r", 10, 40),
        span("q", "r", 20, 95, kind="CONSUMER"),
        span("f", "r", 30, 99, follows_from=True),
    ]
    assert segs(spans) == [("r", 0, 10), ("a", 10, 40), ("r", 40, 100)]
    assert segs(spans, async_blocking=True) == [("r", 0, 30), ("f", 30, 99), ("r", 99, 100)]


def test_orphan_becomes_extra_root_and_the_primary_root_is_the_longest_true_root() -> None:
    spans = [span("r", None, 0, 100), span("a", "r", 0, 30), span("o", "missing", 10, 200)]
    tree = build_tree(spans)
    assert tree.root is not None
    assert tree.root.span_id == "r"
    assert [tree.spans[i].span_id for i in tree.orphans] == ["o"]
    assert len(tree.roots) == 2
    assert segs(spans) == [("a", 0, 30), ("r", 30, 100)]


def test_multi_root_jaeger_walks_every_root() -> None:
    spans = [span("r1", None, 0, 50), span("r2", None, 60, 100), span("c", "r2", 70, 80)]
    assert segs(spans) == [("r1", 0, 50)]
    assert segs(spans, "jaeger") == [("r1", 0, 50), ("r2", 60, 70), ("c", 70, 80), ("r2", 80, 100)]


def test_jaeger_overflow_rules_truncate_and_drop() -> None:
    spans = [
        span("r", None, 100, 200),
        span("late", "r", 200, 250),  # starts at the parent's end: dropped
        span("early", "r", 50, 100),  # ends at the parent's start: dropped
        span("over", "r", 150, 260),  # truncated to 200
    ]
    assert segs(spans, "jaeger") == [("r", 100, 150), ("over", 150, 200)]


def test_cycle_is_broken_and_reported() -> None:
    spans = [span("a", "b", 0, 10), span("b", "a", 5, 20), span("c", "a", 1, 2)]
    tree = build_tree(spans)
    assert [tree.spans[i].span_id for i in tree.cycles_broken] == ["a"]
    assert tree.root is not None
    assert tree.root.span_id == "a"
    assert critical_path(tree).total_ns == 10


def test_clock_skew_is_reported_across_services_only() -> None:
    spans = [
        span("r", None, 0, 100, service="gw"),
        span("x", "r", 90, 120, service="backend"),
        span("y", "r", 95, 110, service="gw"),
    ]
    tree = build_tree(spans)
    by_id = {o.span_id: o for o in tree.outside}
    assert by_id["x"].skew
    assert by_id["x"].after_ns == 20
    assert not by_id["y"].skew


def test_duplicate_span_ids_keep_the_first() -> None:
    tree = build_tree([span("r", None, 0, 10), span("r", None, 0, 99)])
    assert tree.duplicates == 1
    assert tree.duration_ns == 10


def test_deep_tree_does_not_hit_the_recursion_limit() -> None:
    spans = [span("s0", None, 0, 10_000)]
    spans += [span(f"s{k}", f"s{k - 1}", k, 10_000 - k) for k in range(1, 3000)]
    assert critical_path(build_tree(spans)).total_ns == 10_000


@st.composite
def trees(draw: st.DrawFn) -> list[Span]:
    """Random trees whose children lie inside their parents (nothing clipped)."""
    n = draw(st.integers(1, 25))
    spans = [span("s0", None, 0, draw(st.integers(1, 1000)))]
    for k in range(1, n):
        p = spans[draw(st.integers(0, len(spans) - 1))]
        a = draw(st.integers(p.start_ns, p.end_ns))
        b = draw(st.integers(a, p.end_ns))
        spans.append(span(f"s{k}", p.span_id, a, b))
    return spans


@settings(max_examples=100, deadline=None)
@given(trees())
def test_default_path_segments_never_overlap_and_sum_to_the_root(spans: list[Span]) -> None:
    cp = critical_path(build_tree(spans))
    root = spans[0]
    assert not cp.clipped
    assert not cp.ignored
    last_end = root.start_ns
    for seg in cp.segments:
        assert seg.start_ns >= last_end
        assert seg.end_ns > seg.start_ns
        last_end = seg.end_ns
    assert cp.total_ns == root.duration_ns
    assert sum(cp.exclusive_ns.values()) == root.duration_ns
    # Each segment lies inside its span.
    by_id = {s.span_id: s for s in spans}
    for seg in cp.segments:
        assert by_id[seg.span_id].start_ns <= seg.start_ns
        assert seg.end_ns <= by_id[seg.span_id].end_ns


@settings(max_examples=100, deadline=None)
@given(trees())
def test_jaeger_sections_never_exceed_the_root(spans: list[Span]) -> None:
    cp = critical_path(build_tree(spans), policy="jaeger")
    root = spans[0]
    assert cp.total_ns <= root.duration_ns
    last_end = root.start_ns
    for seg in cp.segments:
        assert seg.start_ns >= last_end
        last_end = seg.end_ns
