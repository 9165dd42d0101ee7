"""Critical paths through a span tree, in exact integer nanoseconds.

Two policies (``docs/trace.md`` states both precisely):

``default``
    Walk backwards from the end of a span. Among its blocking children that end at or before the cursor, take the one
    that ends last (ties: the earlier start, then the earlier child in start order); the gap between that child's end
    and the cursor is the parent's own time on the path; recurse into the child over its (clipped) interval; continue
    from the child's start. When no child qualifies, the rest down to the span's start is the parent's own time.
    Children are clipped to their parent's (clipped) interval; children that do not overlap it at all are ignored and
    reported. Touching siblings (one ends exactly when the next starts) both stay on the path. Children linked by
    follows-from, and CONSUMER children, are not blocking unless ``async_blocking``.

``jaeger``
    Jaeger UI's algorithm: non-blocking subtrees removed; children sanitised against their parent in tree order
    (dropped when they start at/after the parent's end or end at/before its start, else truncated); then from each root
    the last-finishing child is taken, and on the way back a sibling must end *strictly* before the returning child's
    start. Sections of zero length are not emitted. One path per root, concatenated in root order.

The path segments of the ``default`` policy never overlap and, when nothing is clipped, sum to the root's duration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.trace.tree import TraceTree

POLICIES = ("default", "jaeger")


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of the critical path: span ``span_id`` owns [start_ns, end_ns)."""

    index: int
    span_id: str
    name: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """The critical path of one trace.

    Attributes:
        trace_id: the trace.
        policy: ``default`` or ``jaeger``.
        segments: ordered by start time.
        exclusive_ns: span id → nanoseconds that span owns on the path.
        clipped: ids of children whose interval was clipped to their parent's.
        ignored: ids of children ignored because they lie entirely outside their parent.
    """

    trace_id: str
    policy: str
    segments: tuple[Segment, ...]
    exclusive_ns: dict[str, int] = field(default_factory=dict)
    clipped: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def total_ns(self) -> int:
        """Sum of segment lengths (ns)."""
        return sum(s.end_ns - s.start_ns for s in self.segments)


def raw_default_path(
    tree: TraceTree, root: int, *, async_blocking: bool = False
) -> tuple[list[tuple[int, int, int]], list[int], list[int]]:
    """The default policy as raw ``(span index, start, end)`` triples in time order, plus clipped and ignored indices.

    Iterative (no recursion limit on deep trees); cost O(n log n) in the number of spans under ``root``.
    """
    starts, ends, children = tree.starts, tree.ends, tree.children
    blocking = None if async_blocking else tree.blocking
    out: list[tuple[int, int, int]] = []
    clipped: list[int] = []
    ignored: list[int] = []

    def prepare(i: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The blocking children of ``i`` clipped to ``[lo, hi]``, as (-end, start, index) sorted: latest end first."""
        kids: list[tuple[int, int, int]] = []
        for c in children[i]:
            if blocking is not None and not blocking[c]:
                continue
            cs, ce = starts[c], ends[c]
            if cs >= lo and ce <= hi:
                if ce > cs:
                    kids.append((-ce, cs, c))
                continue
            if cs < lo:
                cs = lo
            if ce > hi:
                ce = hi
            if ce <= cs:
                ignored.append(c)
                continue
            clipped.append(c)
            kids.append((-ce, cs, c))
        if len(kids) > 1:
            kids.sort()
        return kids

    r0, r1 = starts[root], ends[root]
    # frame: [span index, lo, sorted kids, position, cursor]
    stack: list[list[Any]] = [[root, r0, prepare(root, r0, r1), 0, r1]]
    while stack:
        frame = stack[-1]
        i, lo, kids, pos, cursor = frame
        descended = False
        while pos < len(kids) and cursor > lo:
            neg_end, cs, c = kids[pos]
            pos += 1
            ce = -neg_end
            if ce > cursor:
                continue  # overlaps a later sibling already on the path
            if cursor > ce:
                out.append((i, ce, cursor))
            frame[3] = pos
            frame[4] = cs
            stack.append([c, cs, prepare(c, cs, ce), 0, ce])
            descended = True
            break
        if descended:
            continue
        if cursor > lo:
            out.append((i, lo, cursor))
        stack.pop()
    out.reverse()
    return out, clipped, ignored


def raw_jaeger_path(tree: TraceTree, *, async_blocking: bool = False) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Jaeger UI's critical-path sections as raw ``(span index, start, end)`` triples, plus dropped child indices.

    Sections come in Jaeger's emission order (backwards in time within a root), roots in start order.
    """
    start = list(tree.starts)
    end = list(tree.ends)
    n = len(start)
    blocking = [True] * n if async_blocking else tree.blocking
    alive = [True] * n
    kids: list[list[int]] = [[c for c in k if blocking[c]] for k in tree.children]  # non-blocking subtrees removed
    dropped: list[int] = []
    sections: list[tuple[int, int, int]] = []
    for root in tree.roots:
        # Pre-order walk: a parent is sanitised before its children, so clipping cascades like Jaeger's map order.
        order: list[int] = []
        todo = [root]
        while todo:
            i = todo.pop()
            order.append(i)
            todo.extend(reversed(kids[i]))
        for i in order:
            p = tree.parent[i]
            if p < 0:
                continue
            if not alive[p]:
                alive[i] = False
                continue
            ps, pe = start[p], end[p]
            if start[i] >= ps:
                if start[i] >= pe:
                    alive[i] = False
                elif end[i] > pe:
                    end[i] = pe
            elif end[i] <= ps:
                alive[i] = False
            else:
                start[i] = ps
                end[i] = min(end[i], pe)
            if not alive[i]:
                dropped.append(i)
                kids[p] = [c for c in kids[p] if c != i]
        sections.extend(_jaeger_sections(tree, root, kids, alive, start, end))
    return sections, dropped


def _jaeger_sections(
    tree: TraceTree, root: int, kids: list[list[int]], alive: list[bool], start: list[int], end: list[int]
) -> list[tuple[int, int, int]]:
    """From ``root``: take the child that finishes last, descend; on the way back a sibling must end strictly before
    the returning child's start."""
    sections: list[tuple[int, int, int]] = []
    span = root
    returning: int | None = None
    while True:
        lfc = -1
        max_end = -1
        for c in kids[span]:
            if not alive[c]:
                continue
            ce = end[c]
            # Jaeger tests ``returning`` for truthiness, which loops forever on a start time of exactly 0;
            # epoch timestamps are never 0, so testing for None is the same everywhere it terminates.
            if returning is not None:
                if ce < returning and ce > max_end:
                    max_end, lfc = ce, c
            elif ce > max_end:
                max_end, lfc = ce, c
        section_end = returning if returning is not None else end[span]
        if lfc >= 0:
            if end[lfc] != section_end:
                sections.append((span, end[lfc], section_end))
            span, returning = lfc, None
        else:
            if start[span] != section_end:
                sections.append((span, start[span], section_end))
            p = tree.parent[span]
            if p < 0 or span == root:
                break
            returning = start[span]
            span = p
    return sections


def critical_path(tree: TraceTree, *, policy: str = "default", async_blocking: bool = False) -> CriticalPath:
    """The critical path of a trace under ``policy`` (``default`` or ``jaeger``).

    The default policy runs from the primary root (see :class:`~tailscope.trace.tree.TraceTree`); other roots are
    reported by the tree, not walked. The jaeger policy walks every root, like Jaeger UI.

    Raises:
        ValueError: for an unknown policy.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown critical-path policy {policy!r}: use one of {', '.join(POLICIES)}")
    if tree.primary < 0:
        return CriticalPath(trace_id=tree.trace_id, policy=policy, segments=())
    clipped: list[int] = []
    ignored: list[int] = []
    if policy == "default":
        raw, clipped, ignored = raw_default_path(tree, tree.primary, async_blocking=async_blocking)
    else:
        raw, ignored = raw_jaeger_path(tree, async_blocking=async_blocking)
        raw = sorted(raw, key=lambda t: (t[1], t[2]))
    sids, names = tree.span_ids, tree.names
    segments = tuple(Segment(i, sids[i], names[i], s, e) for i, s, e in raw)
    exclusive: dict[str, int] = {}
    for seg in segments:
        exclusive[seg.span_id] = exclusive.get(seg.span_id, 0) + seg.end_ns - seg.start_ns
    return CriticalPath(
        trace_id=tree.trace_id,
        policy=policy,
        segments=segments,
        exclusive_ns=exclusive,
        clipped=tuple(sids[i] for i in clipped),
        ignored=tuple(sids[i] for i in ignored),
    )
