"""Span trees: parent links resolved, with orphans, cycles, multiple roots and clock skew made explicit.

A :class:`TraceTree` indexes the spans of one trace by position. Nothing is silently repaired: a span whose parent is
missing becomes an extra root and is counted as an orphan; a parent cycle is broken at its earliest-starting span and
reported; a child that lies (partly) outside its parent is reported as clock skew when the two spans come from
different services (hosts), else as an overflow. Clipping children to their parent is a critical-path policy
(:mod:`tailscope.trace.critical_path`), not something the tree does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailscope.records import Span

#: Span kinds whose children never block the parent (a consumer runs after the producer returned).
NON_BLOCKING_CHILD_KINDS = frozenset({"CONSUMER"})


@dataclass(frozen=True, slots=True)
class OutsideParent:
    """A child span that is not inside its parent's interval.

    Attributes:
        span_id: the child.
        parent_id: its parent.
        before_ns: how far the child starts before the parent (0 when it does not).
        after_ns: how far the child ends after the parent (0 when it does not).
        skew: True when parent and child come from different services (likely clock skew between hosts).
        disjoint: True when the child lies entirely outside the parent.
    """

    span_id: str
    parent_id: str
    before_ns: int
    after_ns: int
    skew: bool
    disjoint: bool


@dataclass(frozen=True, slots=True)
class TraceTree:
    """The spans of one trace with resolved parent links.

    Attributes:
        trace_id: the trace.
        spans: the spans (duplicated span ids dropped, first one kept).
        parent: index of each span's parent, -1 for roots.
        children: indices of each span's children, sorted by (start, end, span id).
        roots: indices of spans without a (present) parent, sorted by start.
        orphans: indices of spans that name a parent that is not in the trace.
        cycles_broken: indices of spans whose parent link was cut to break a cycle.
        duplicates: how many spans were dropped because their span id repeated.
        outside: children not contained in their parent.
        primary: index of the root the trace's latency is measured on (-1 for an empty tree).
    """

    trace_id: str
    spans: tuple[Span, ...]
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    roots: tuple[int, ...]
    orphans: tuple[int, ...]
    cycles_broken: tuple[int, ...]
    duplicates: int
    outside: tuple[OutsideParent, ...]
    primary: int

    @property
    def root(self) -> Span | None:
        """The primary root span (None for an empty tree)."""
        return self.spans[self.primary] if self.primary >= 0 else None

    @property
    def duration_ns(self) -> int:
        """Latency of the trace: the primary root's duration in ns (0 for an empty tree)."""
        root = self.root
        return root.duration_ns if root is not None else 0

    def is_blocking(self, child: int, *, async_blocking: bool = False) -> bool:
        """Whether a child blocks its parent: follows-from links and CONSUMER children do not, by default."""
        if async_blocking:
            return True
        span = self.spans[child]
        return not (span.follows_from or span.kind in NON_BLOCKING_CHILD_KINDS)

    def depth(self, index: int) -> int:
        """Number of ancestors of a span (0 for a root)."""
        d = 0
        p = self.parent[index]
        while p >= 0:
            d += 1
            p = self.parent[p]
        return d


def _choose_primary(spans: Sequence[Span], roots: list[int], orphan_set: set[int]) -> int:
    if not roots:
        return -1
    true_roots = [r for r in roots if r not in orphan_set] or roots
    # The longest true root; ties: the earliest start, then the smallest span id (deterministic).
    return min(true_roots, key=lambda r: (-spans[r].duration_ns, spans[r].start_ns, spans[r].span_id))


def build_tree(spans: Sequence[Span], trace_id: str | None = None) -> TraceTree:
    """Resolve parent links of one trace's spans.

    Args:
        spans: the spans of one trace, in any order.
        trace_id: the trace id (defaults to the first span's).

    Returns:
        The tree; see :class:`TraceTree` for how orphans, cycles and overflowing children are reported.
    """
    index: dict[str, int] = {}
    kept: list[Span] = []
    duplicates = 0
    for s in spans:
        if s.span_id in index:
            duplicates += 1
            continue
        index[s.span_id] = len(kept)
        kept.append(s)
    n = len(kept)
    parent = [-1] * n
    orphans: list[int] = []
    for i, s in enumerate(kept):
        pid = s.parent_id
        if pid:
            p = index.get(pid, -1)
            if p < 0 or p == i:
                orphans.append(i)
            else:
                parent[i] = p
    cycles_broken = break_cycles(parent, lambda j: (kept[j].start_ns, kept[j].span_id))
    kids: list[list[int]] = [[] for _ in range(n)]
    roots: list[int] = []
    for i in range(n):
        p = parent[i]
        if p < 0:
            roots.append(i)
        else:
            kids[p].append(i)

    def order(i: int) -> tuple[int, int, str]:
        s = kept[i]
        return (s.start_ns, s.end_ns, s.span_id)

    for k in kids:
        if len(k) > 1:
            k.sort(key=order)
    roots.sort(key=order)
    outside: list[OutsideParent] = []
    for i in range(n):
        p = parent[i]
        if p < 0:
            continue
        c, ps = kept[i], kept[p]
        if c.start_ns >= ps.start_ns and c.end_ns <= ps.end_ns:
            continue
        outside.append(
            OutsideParent(
                span_id=c.span_id,
                parent_id=ps.span_id,
                before_ns=max(0, ps.start_ns - c.start_ns),
                after_ns=max(0, c.end_ns - ps.end_ns),
                skew=c.service != ps.service,
                disjoint=c.end_ns <= ps.start_ns or c.start_ns >= ps.end_ns,
            )
        )
    orphan_set = set(orphans)
    return TraceTree(
        trace_id=trace_id if trace_id is not None else (kept[0].trace_id if kept else ""),
        spans=tuple(kept),
        parent=tuple(parent),
        children=tuple(tuple(k) for k in kids),
        roots=tuple(roots),
        orphans=tuple(orphans),
        cycles_broken=tuple(cycles_broken),
        duplicates=duplicates,
        outside=tuple(outside),
        primary=_choose_primary(kept, roots, orphan_set),
    )


def break_cycles(parent: list[int], order: Callable[[int], tuple[int, str]]) -> list[int]:
    """Cut parent links that form cycles (mutates ``parent``); return the indices whose link was cut.

    Each index is coloured by walking up its parent chain; a walk that meets an index of the same walk has found a
    cycle, which is broken at its member with the smallest ``order`` (start time, then span id).
    """
    n = len(parent)
    state = [0] * n  # 0 = unvisited, 1 = on the current walk, 2 = known to reach a root
    cut: list[int] = []
    for start in range(n):
        if state[start]:
            continue
        walk: list[int] = []
        i = start
        while i >= 0 and state[i] == 0:
            state[i] = 1
            walk.append(i)
            i = parent[i]
        if i >= 0 and state[i] == 1:
            # i is on this walk: the cycle is walk[walk.index(i):].
            victim = min(walk[walk.index(i) :], key=order)
            parent[victim] = -1
            cut.append(victim)
        for j in walk:
            state[j] = 2
    return cut


def group_by_trace(spans: Sequence[Span]) -> dict[str, list[Span]]:
    """Spans grouped by trace id, in first-seen order."""
    out: dict[str, list[Span]] = {}
    for s in spans:
        out.setdefault(s.trace_id, []).append(s)
    return out
