"""Span trees: parent links resolved, with orphans, cycles, multiple roots and clock skew made explicit.

A :class:`TraceTree` holds one trace's spans as columns (one tuple per field, indexed by position) in
``(start, end, span id)`` order, so children lists come out sorted without sorting them. Nothing is silently
repaired: a span whose parent is missing becomes an extra root and is counted as an orphan; a parent cycle is broken
at its earliest-starting span and reported; a child that lies (partly) outside its parent is reported as clock skew
when the two spans come from different services (hosts), else as an overflow. Clipping children to their parent is a
critical-path policy (:mod:`tailscope.trace.critical_path`), not something the tree does.

Trees are built from store rows (:func:`tree_from_rows`, the analyses' path: no object per span) or from
:class:`~tailscope.records.Span` objects (:func:`build_tree`, which makes them rows first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailscope.records import Span

#: Span kinds whose children never block the parent (a consumer runs after the producer returned).
NON_BLOCKING_CHILD_KINDS = frozenset({"CONSUMER"})

#: One span as the store reads it: trace id, span id, parent id, name, start ns, end ns, service, kind, status,
#: layer, follows-from, ``http.request.resend_count`` (or None).
SpanRow = tuple[str, str, str | None, str, int, int, str, str, str, str, bool, int | None]


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
    """The spans of one trace as columns, with resolved parent links.

    Span ``i`` is ``span_ids[i]``, ``names[i]``, ``starts[i]`` … (duplicated span ids dropped, the first one kept),
    in ``(start, end, span id)`` order.

    Attributes:
        trace_id: the trace.
        span_ids, parent_ids, names, starts, ends, services, kinds, statuses, layers, follows_from, resends: the
            columns (``layers`` as classified at ingest; :func:`tailscope.trace.facts.span_layers` refines them with
            the tree; ``resends`` is ``http.request.resend_count`` or None).
        parent: index of each span's parent, -1 for roots.
        children: indices of each span's children, sorted by (start, end, span id).
        roots: indices of spans without a (present) parent, sorted like children.
        orphans: indices of spans that name a parent that is not in the trace.
        cycles_broken: indices of spans whose parent link was cut to break a cycle.
        duplicates: how many spans were dropped because their span id repeated.
        outside: children not contained in their parent.
        primary: index of the root the trace's latency is measured on (-1 for an empty tree).
        blocking: whether each span blocks its parent (not follows-from, not a CONSUMER).
        source: the :class:`Span` objects the tree was built from (empty when built from rows).
    """

    trace_id: str
    span_ids: Sequence[str]
    parent_ids: Sequence[str | None]
    names: Sequence[str]
    starts: Sequence[int]
    ends: Sequence[int]
    services: Sequence[str]
    kinds: Sequence[str]
    statuses: Sequence[str]
    layers: Sequence[str]
    follows_from: Sequence[bool]
    resends: Sequence[int | None]
    parent: Sequence[int]
    children: Sequence[Sequence[int]]
    roots: Sequence[int]
    orphans: Sequence[int]
    cycles_broken: Sequence[int]
    duplicates: int
    outside: Sequence[OutsideParent]
    primary: int
    blocking: Sequence[bool] = ()
    source: tuple[Span, ...] = ()

    @property
    def spans(self) -> tuple[Span, ...]:
        """The spans as :class:`Span` objects (made from the columns unless the tree was built from spans)."""
        if self.source or not self.span_ids:
            return self.source
        columns = (self.span_ids, self.parent_ids, self.names, self.starts, self.ends, self.services, self.kinds,
                   self.statuses, self.layers, self.follows_from, self.resends)  # fmt: skip
        return tuple(
            Span(
                self.trace_id,
                sid,
                pid,
                name,
                start,
                end,
                service,
                kind,
                status,
                {"http.request.resend_count": resend} if resend else {},
                (),
                layer,
                bool(follows),
            )
            for sid, pid, name, start, end, service, kind, status, layer, follows, resend in zip(*columns, strict=True)
        )

    @property
    def root(self) -> Span | None:
        """The primary root span (None for an empty tree)."""
        return self.spans[self.primary] if self.primary >= 0 else None

    @property
    def duration_ns(self) -> int:
        """Latency of the trace: the primary root's duration in ns (0 for an empty tree)."""
        p = self.primary
        return self.ends[p] - self.starts[p] if p >= 0 else 0

    def is_blocking(self, child: int, *, async_blocking: bool = False) -> bool:
        """Whether a child blocks its parent: follows-from links and CONSUMER children do not, by default."""
        return async_blocking or self.blocking[child]

    def depth(self, index: int) -> int:
        """Number of ancestors of a span (0 for a root)."""
        d = 0
        p = self.parent[index]
        while p >= 0:
            d += 1
            p = self.parent[p]
        return d


def as_row(span: Span) -> SpanRow:
    """One span as a :data:`SpanRow` (``resend`` from its attributes)."""
    resend = span.attributes.get("http.request.resend_count") if span.attributes else None
    return (span.trace_id, span.span_id, span.parent_id, span.name, span.start_ns, span.end_ns, span.service,
            span.kind, span.status, span.layer, span.follows_from,
            resend if type(resend) is int and -(2**31) <= resend < 2**31 else None)  # fmt: skip


def build_tree(spans: Sequence[Span], trace_id: str | None = None) -> TraceTree:
    """Resolve parent links of one trace's spans (in any order; of repeated span ids the first is kept).

    Args:
        spans: the spans of one trace.
        trace_id: the trace id (defaults to the first span's).
    """
    seen: set[str] = set()
    kept = [s for s in spans if not (s.span_id in seen or seen.add(s.span_id))]  # type: ignore[func-returns-value]
    kept.sort(key=lambda s: (s.start_ns, s.end_ns, s.span_id))
    return tree_from_rows(
        [as_row(s) for s in kept],
        duplicates=len(spans) - len(kept),
        trace_id=trace_id if trace_id is not None else (spans[0].trace_id if spans else ""),
        source=tuple(kept),
    )


def tree_from_rows(
    rows: Sequence[SpanRow], *, duplicates: int = 0, trace_id: str | None = None, source: tuple[Span, ...] = ()
) -> TraceTree:
    """The tree of one trace's rows, sorted by ``(start, end, span id)`` as the store reads them.

    Of rows that repeat a span id the first is kept and the rest counted (added to ``duplicates``); ``trace_id``
    defaults to the first row's, ``source`` is kept as :attr:`TraceTree.source`.
    """
    if not rows:
        none: tuple[()] = ()
        columns = (none,) * 11
        return TraceTree(trace_id or "", *columns, none, none, none, none, none, duplicates, none, -1, none, source)
    cols = list(zip(*rows, strict=True))
    index = {sid: i for i, sid in enumerate(cols[1])}
    if len(index) != len(rows):
        seen: set[str] = set()
        kept = [r for r in rows if not (r[1] in seen or seen.add(r[1]))]  # type: ignore[func-returns-value]
        duplicates += len(rows) - len(kept)
        cols = list(zip(*kept, strict=True))
        index = {sid: i for i, sid in enumerate(cols[1])}
    sids, starts, ends = cols[1], cols[4], cols[5]
    parent, orphans, backward = _link(cols[2], index)
    cycles = break_cycles(parent, lambda j: (starts[j], sids[j])) if backward else []
    children, roots, outside = _children(parent, starts, ends)
    return TraceTree(
        trace_id=rows[0][0] if trace_id is None else trace_id,
        span_ids=sids,
        parent_ids=cols[2],
        names=cols[3],
        starts=starts,
        ends=ends,
        services=cols[6],
        kinds=cols[7],
        statuses=cols[8],
        layers=cols[9],
        follows_from=cols[10],
        resends=cols[11],
        parent=parent,
        children=children,
        roots=roots,
        orphans=orphans,
        cycles_broken=cycles,
        duplicates=duplicates,
        outside=_outside(outside, parent, starts, ends, cols[6], sids) if outside else (),
        primary=_primary(roots, orphans, starts, ends, sids),
        blocking=[not (f or k in NON_BLOCKING_CHILD_KINDS) for f, k in zip(cols[10], cols[7], strict=True)],
        source=source,
    )


def _link(parent_ids: Sequence[str | None], index: dict[str, int]) -> tuple[list[int], list[int], bool]:
    """Parent indices, orphans (a parent id not in the trace, or the span itself), and whether any parent comes
    after its child (the only way a cycle can form, as spans are in time order)."""
    parent = [-1] * len(parent_ids)
    orphans: list[int] = []
    backward = False
    get = index.get
    for i, pid in enumerate(parent_ids):
        if pid:
            p = get(pid, -1)
            if p < 0 or p == i:
                orphans.append(i)
            else:
                parent[i] = p
                if p > i:
                    backward = True
    return parent, orphans, backward


def _children(
    parent: list[int], starts: Sequence[int], ends: Sequence[int]
) -> tuple[list[Sequence[int]], list[int], list[int]]:
    """Children lists (``()`` for leaves, no list per leaf) and roots, both in span order, and the children that
    are not inside their parent's interval."""
    children: list[Sequence[int]] = [()] * len(parent)
    roots: list[int] = []
    outside: list[int] = []
    for i, p in enumerate(parent):
        if p < 0:
            roots.append(i)
            continue
        kids = children[p]
        if kids:
            kids.append(i)  # type: ignore[attr-defined]
        else:
            children[p] = [i]
        if starts[i] < starts[p] or ends[i] > ends[p]:
            outside.append(i)
    return children, roots, outside


def _outside(
    outside: list[int],
    parent: list[int],
    starts: Sequence[int],
    ends: Sequence[int],
    services: Sequence[str],
    sids: Sequence[str],
) -> list[OutsideParent]:
    out: list[OutsideParent] = []
    for i in outside:
        p = parent[i]
        out.append(
            OutsideParent(
                span_id=sids[i],
                parent_id=sids[p],
                before_ns=max(0, starts[p] - starts[i]),
                after_ns=max(0, ends[i] - ends[p]),
                skew=services[i] != services[p],
                disjoint=ends[i] <= starts[p] or starts[i] >= ends[p],
            )
        )
    return out


def _primary(
    roots: list[int], orphans: list[int], starts: Sequence[int], ends: Sequence[int], sids: Sequence[str]
) -> int:
    """The longest true root (no parent id); ties: the earliest start, then the smallest span id. Without a true
    root, the longest orphan."""
    if len(roots) == 1:
        return roots[0]
    orphan_set = set(orphans)
    true_roots = [r for r in roots if r not in orphan_set] or roots
    return min(true_roots, key=lambda r: (starts[r] - ends[r], starts[r], sids[r]))


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
