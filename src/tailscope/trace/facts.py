"""Per-trace facts: everything the set analyses and the diff need, computed once per trace.

A :class:`TraceFacts` is small (a few dicts keyed by operation and layer), so a set of tens of thousands of traces is
held as facts while the spans themselves stay in the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.trace.critical_path import raw_default_path, raw_jaeger_path
from tailscope.trace.layers import refine_layer
from tailscope.trace.tree import SpanRow, TraceTree, tree_from_rows
from tailscope.trace.waterfall import WaterfallGroup, find_waterfalls


@dataclass(slots=True)
class OpFacts:
    """Per-operation totals inside one trace (all ns).

    Attributes:
        count: spans of this operation.
        duration_ns: summed span durations.
        self_ns: summed time where the span runs but none of its children does.
        gap_ns: ``self_ns`` of spans that have children (parent time where no child runs: queueing, pool waits).
        gap_path_ns: the part of ``gap_ns`` that lies on the critical path.
        fanout: the widest concurrency among one span's children.
        children: the most children one span of this operation has.
    """

    count: int = 0
    duration_ns: int = 0
    self_ns: int = 0
    gap_ns: int = 0
    gap_path_ns: int = 0
    fanout: int = 0
    children: int = 0


@dataclass(frozen=True, slots=True)
class Retry:
    """Siblings repeating an operation: ``attempts`` spans, the failed ones costing ``cost_ns`` of critical path."""

    op: str
    attempts: int
    cost_ns: int


@dataclass(slots=True)
class TraceFacts:
    """What one trace contributes to the analyses.

    Attributes:
        trace_id: the trace.
        root_op: the primary root's name.
        duration_ns: the primary root's duration.
        path_layer: layer → exclusive critical-path ns.
        path_op: operation → exclusive critical-path ns.
        incl_op: operation → inclusive critical-path ns (time on the path in that operation's subtrees; the root
            operation excluded); an operation that appears nested in itself is counted once.
        branch: operation → the root's child whose subtree it was found in (first seen).
        ops: operation → :class:`OpFacts`.
        retries: retry groups.
        waterfalls: waterfall groups.
        anomalies: counters (orphans, extra_roots, cycles, skew, overflow, ignored, clipped, duplicates).
        spans: number of spans.
    """

    trace_id: str
    root_op: str
    duration_ns: int
    path_layer: dict[str, int] = field(default_factory=dict)
    path_op: dict[str, int] = field(default_factory=dict)
    incl_op: dict[str, int] = field(default_factory=dict)
    branch: dict[str, str] = field(default_factory=dict)
    ops: dict[str, OpFacts] = field(default_factory=dict)
    retries: list[Retry] = field(default_factory=list)
    waterfalls: list[WaterfallGroup] = field(default_factory=list)
    anomalies: dict[str, int] = field(default_factory=dict)
    spans: int = 0


def trace_facts(
    tree: TraceTree,
    *,
    policy: str = "default",
    async_blocking: bool = False,
    consumes: Mapping[int, set[int]] | None = None,
) -> TraceFacts:
    """Compute the per-trace facts of one tree under a critical-path policy (``default`` or ``jaeger``).

    ``consumes`` (span index → indices whose output it consumes) keeps dependent calls out of waterfalls.

    Stages: anomalies of the tree; the critical path; layers refined with the tree; path time per span, layer and
    operation; inclusive path time, model calls and branches per subtree; per-operation totals; retries; waterfalls.
    """
    p = tree.primary
    facts = TraceFacts(
        trace_id=tree.trace_id,
        root_op=tree.names[p] if p >= 0 else "",
        duration_ns=tree.duration_ns,
        spans=len(tree.span_ids),
    )
    if tree.orphans or len(tree.roots) > 1 or tree.cycles_broken or tree.outside or tree.duplicates:
        _count(facts.anomalies, tree_anomalies(tree))
    if p < 0:
        return facts
    if policy == "jaeger":
        path, ignored = raw_jaeger_path(tree, async_blocking=async_blocking)
        clipped: list[int] = []
    else:
        path, clipped, ignored = raw_default_path(tree, p, async_blocking=async_blocking)
    if clipped or ignored:
        _count(facts.anomalies, {"clipped": len(clipped), "ignored": len(ignored)})
    layers = span_layers(tree)
    excl, own_segments = _path_time(tree, path, layers, facts)
    order = preorder(tree)
    incl, has_model = _subtree_totals(tree, order, excl, layers)
    _inclusive_ops(tree, order, incl, facts)
    _op_totals(tree, own_segments, facts.ops)
    facts.retries.extend(find_retries(tree, incl))
    facts.waterfalls = find_waterfalls(
        tree, layers, has_model, incl, own_segments, async_blocking=async_blocking, consumes=consumes
    )
    return facts


def facts_from_rows(rows: Sequence[SpanRow], *, policy: str = "default", async_blocking: bool = False) -> TraceFacts:
    """:func:`trace_facts` of one trace's store rows (sorted by ``(start, end, span id)``, as the store reads them)."""
    return trace_facts(tree_from_rows(rows), policy=policy, async_blocking=async_blocking)


def tree_anomalies(tree: TraceTree) -> dict[str, int]:
    """What the tree builder found: orphans, extra roots, cycles, skew, overflow, duplicates."""
    skew = sum(1 for o in tree.outside if o.skew)
    return {
        "orphans": len(tree.orphans),
        "extra_roots": max(0, len(tree.roots) - 1),
        "cycles": len(tree.cycles_broken),
        "skew": skew,
        "overflow": len(tree.outside) - skew,
        "duplicates": tree.duplicates,
    }


def _count(anomalies: dict[str, int], found: dict[str, int]) -> None:
    for key, value in found.items():
        if value:
            anomalies[key] = value


def span_layers(tree: TraceTree) -> list[str]:
    """Each span's layer, refined with the tree (a CLIENT call without a SERVER child is an external API; an LLM
    CLIENT call with one is the network)."""
    out = list(tree.layers)
    kinds, children, parent = tree.kinds, tree.children, tree.parent
    for i, layer in enumerate(out):
        if layer == "network" or layer == "gateway" or (layer == "inference" and kinds[i] == "CLIENT"):
            out[i] = refine_layer(layer, kinds[i], [kinds[c] for c in children[i]], is_root=parent[i] < 0)
    return out


def preorder(tree: TraceTree) -> list[int]:
    """Span indices with every parent before its children (children in start order)."""
    order: list[int] = []
    children = tree.children
    stack = list(reversed(tree.roots))
    while stack:
        i = stack.pop()
        order.append(i)
        kids = children[i]
        if kids:
            stack.extend(reversed(kids))
    return order


def _path_time(
    tree: TraceTree, path: list[tuple[int, int, int]], layers: list[str], facts: TraceFacts
) -> tuple[list[int], dict[int, list[tuple[int, int]]]]:
    """Exclusive path ns per span, summed per operation and layer into ``facts``; the path segments of spans that
    have children (their own time on the path)."""
    names, children = tree.names, tree.children
    excl = [0] * len(names)
    own_segments: dict[int, list[tuple[int, int]]] = {}
    path_layer, path_op = facts.path_layer, facts.path_op
    for i, s, e in path:
        d = e - s
        excl[i] += d
        name = names[i]
        path_op[name] = path_op.get(name, 0) + d
        layer = layers[i]
        path_layer[layer] = path_layer.get(layer, 0) + d
        if children[i]:
            segs = own_segments.get(i)
            if segs is None:
                own_segments[i] = [(s, e)]
            else:
                segs.append((s, e))
    return excl, own_segments


def _subtree_totals(
    tree: TraceTree, order: list[int], excl: list[int], layers: list[str]
) -> tuple[list[int], list[bool]]:
    """Inclusive path ns of each span's subtree, and whether it holds a model call (an inference span)."""
    parent = tree.parent
    incl = excl[:]
    has_model = [layer == "inference" for layer in layers]
    for i in reversed(order):
        p = parent[i]
        if p >= 0:
            incl[p] += incl[i]
            if has_model[i]:
                has_model[p] = True
    return incl, has_model


def _inclusive_ops(tree: TraceTree, order: list[int], incl: list[int], facts: TraceFacts) -> None:
    """Inclusive path ns per operation below the primary root, with the branch (root's child) it was first found
    under; an operation nested in itself counts once."""
    names, parent, primary = tree.names, tree.parent, tree.primary
    branch_of = [-1] * len(names)
    for i in order:
        p = parent[i]
        if p == primary:
            branch_of[i] = i
        elif p >= 0 and branch_of[p] >= 0:
            branch_of[i] = branch_of[p]
    root_name = names[primary]
    count: dict[str, int] = {}
    for name in names:
        count[name] = count.get(name, 0) + 1
    incl_op, branch = facts.incl_op, facts.branch
    for i in order:
        name = names[i]
        if incl[i] <= 0 or i == primary or branch_of[i] < 0 or name == root_name:
            continue
        if count[name] > 1 and _nested_in_itself(tree, i):
            continue
        incl_op[name] = incl_op.get(name, 0) + incl[i]
        if name not in branch:
            branch[name] = names[branch_of[i]]


def _nested_in_itself(tree: TraceTree, i: int) -> bool:
    """Whether an ancestor of span ``i`` below the primary root has its name."""
    names, parent, primary = tree.names, tree.parent, tree.primary
    p = parent[i]
    while p >= 0 and p != primary:
        if names[p] == names[i]:
            return True
        p = parent[p]
    return False


def _op_totals(tree: TraceTree, own_segments: dict[int, list[tuple[int, int]]], ops: dict[str, OpFacts]) -> None:
    """Per operation: spans, duration, self time, gaps (and the part on the path), widest fan-out, most children."""
    names, starts, ends, children = tree.names, tree.starts, tree.ends, tree.children
    for i, name in enumerate(names):
        op = ops.get(name)
        if op is None:
            op = ops[name] = OpFacts()
        op.count += 1
        dur = ends[i] - starts[i]
        op.duration_ns += dur
        kids = children[i]
        if not kids:
            op.self_ns += dur
            continue
        union, clip, overlap = _children_union(tree, i)
        gap = dur - sum(y - x for x, y in union)
        op.self_ns += gap
        op.gap_ns += gap
        for x, y in own_segments.get(i, ()):
            op.gap_path_ns += (y - x) - _covered(union, x, y)
        if len(kids) > op.children:
            op.children = len(kids)
        width = (fanout_width(clip) if overlap else 1) if clip else 0
        if width > op.fanout:
            op.fanout = width


def _children_union(tree: TraceTree, i: int) -> tuple[list[list[int]], list[tuple[int, int]], bool]:
    """The children of ``i`` clipped to it: the union of their intervals, the clipped intervals, and whether any two
    overlap (one pass; children are sorted by start)."""
    starts, ends = tree.starts, tree.ends
    s0, e0 = starts[i], ends[i]
    union: list[list[int]] = []
    clip: list[tuple[int, int]] = []
    overlap = False
    reach = s0
    last: list[int] = []
    for c in tree.children[i]:
        x, y = starts[c], ends[c]
        if y <= s0 or x >= e0:
            continue
        if x < s0:
            x = s0
        if y > e0:
            y = e0
        clip.append((x, y))
        if last and x < reach:
            overlap = True
        if last and x <= last[1]:
            if y > last[1]:
                last[1] = y
        else:
            last = [x, y]
            union.append(last)
        if y > reach:
            reach = y
    return union, clip, overlap


def _covered(union: list[list[int]], x: int, y: int) -> int:
    """How much of ``[x, y)`` the union covers."""
    covered = 0
    for u0, u1 in union:
        if u1 > x and u0 < y:
            covered += (u1 if u1 < y else y) - (u0 if u0 > x else x)
    return covered


def fanout_width(intervals: list[tuple[int, int]]) -> int:
    """The most intervals running at once (intervals sorted by start; at least one)."""
    end = intervals[0][1]
    for s, e in intervals[1:]:
        if s < end:
            break
        end = max(end, e)
    else:
        return 1  # no two overlap: the common sequential case, without sorting events
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda t: (t[0], t[1]))
    width = best = 0
    for _, d in events:
        width += d
        best = max(best, width)
    return best


def find_retries(tree: TraceTree, incl: list[int]) -> list[Retry]:
    """Runs of same-name siblings where each later one follows an error or carries ``http.request.resend_count``;
    the cost of a run is the path time of its failed attempts (all but the last)."""
    names, statuses, resends = tree.names, tree.statuses, tree.resends
    out: list[Retry] = []
    for kids in tree.children:
        k = 0
        while k < len(kids) - 1:
            first = names[kids[k]]
            j = k + 1
            cost = 0
            while j < len(kids):
                cur, prev = kids[j], kids[j - 1]
                if names[cur] != first or (statuses[prev] != "ERROR" and not resends[cur]):
                    break
                cost += incl[prev]
                j += 1
            if j - k > 1:
                out.append(Retry(op=first, attempts=j - k, cost_ns=cost))
            k = j
    return out


#: A :class:`TraceFacts` as nested tuples, lists and dicts of str and int only (``marshal``-able).
FactsTuple = tuple[Any, ...]


def facts_to_tuple(f: TraceFacts) -> FactsTuple:
    """``f`` as plain data, for sending between processes (``marshal`` is several times cheaper than pickling the
    dataclasses)."""
    return (
        f.trace_id,
        f.root_op,
        f.duration_ns,
        f.path_layer,
        f.path_op,
        f.incl_op,
        f.branch,
        {
            k: (o.count, o.duration_ns, o.self_ns, o.gap_ns, o.gap_path_ns, o.fanout, o.children)
            for k, o in f.ops.items()
        },
        [(r.op, r.attempts, r.cost_ns) for r in f.retries],
        [(g.pattern, g.parent_id, g.member_ids, g.window_ns, g.local_saving_ns, g.saving_ns) for g in f.waterfalls],
        f.anomalies,
        f.spans,
    )


def facts_from_tuple(t: FactsTuple) -> TraceFacts:
    """The inverse of :func:`facts_to_tuple`."""
    tid, root_op, duration, path_layer, path_op, incl_op, branch, ops, retries, waterfalls, anomalies, spans = t
    return TraceFacts(
        tid,
        root_op,
        duration,
        path_layer,
        path_op,
        incl_op,
        branch,
        {k: OpFacts(*v) for k, v in ops.items()},
        [Retry(*r) for r in retries],
        [WaterfallGroup(*w) for w in waterfalls],
        anomalies,
        spans,
    )
