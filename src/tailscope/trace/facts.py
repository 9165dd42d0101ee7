"""Per-trace facts: everything the set analyses and the diff need, computed once per trace.

A :class:`TraceFacts` is small (a few dicts keyed by operation and layer), so a set of tens of thousands of traces is
held as facts while the spans themselves stay in the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.trace.critical_path import raw_default_path, raw_jaeger_path
from tailscope.trace.layers import refine_layer
from tailscope.trace.tree import TraceTree
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


def span_layers(tree: TraceTree) -> list[str]:
    """Each span's layer, refined with the tree (a CLIENT call without a SERVER child is an external API)."""
    spans = tree.spans
    out: list[str] = []
    for i, s in enumerate(spans):
        layer = s.layer
        if layer == "network" or layer == "gateway":
            kinds = [spans[c].kind for c in tree.children[i]]
            layer = refine_layer(layer, s.kind, kinds, is_root=tree.parent[i] < 0)
        out.append(layer)
    return out


def _preorder(tree: TraceTree) -> list[int]:
    """Span indices with every parent before its children."""
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


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in intervals:  # sorted by start (children are)
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _overlap(a: list[tuple[int, int]], s: int, e: int) -> int:
    total = 0
    for x, y in a:
        if y <= s or x >= e:
            continue
        total += min(y, e) - max(x, s)
    return total


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


def trace_facts(tree: TraceTree, *, policy: str = "default", async_blocking: bool = False) -> TraceFacts:
    """Compute the per-trace facts of one tree under a critical-path policy."""
    spans = tree.spans
    root = tree.root
    facts = TraceFacts(
        trace_id=tree.trace_id,
        root_op=root.name if root is not None else "",
        duration_ns=tree.duration_ns,
        spans=len(spans),
    )
    anomalies = facts.anomalies
    for key, value in (
        ("orphans", len(tree.orphans)),
        ("extra_roots", max(0, len(tree.roots) - 1)),
        ("cycles", len(tree.cycles_broken)),
        ("skew", sum(1 for o in tree.outside if o.skew)),
        ("overflow", sum(1 for o in tree.outside if not o.skew)),
        ("duplicates", tree.duplicates),
    ):
        if value:
            anomalies[key] = value
    if root is None:
        return facts
    if policy == "jaeger":
        path, ignored = raw_jaeger_path(tree, async_blocking=async_blocking)
        clipped: list[int] = []
    else:
        path, clipped, ignored = raw_default_path(tree, tree.primary, async_blocking=async_blocking)
    if clipped:
        anomalies["clipped"] = len(clipped)
    if ignored:
        anomalies["ignored"] = len(ignored)
    layers = span_layers(tree)
    order = _preorder(tree)
    n = len(spans)
    excl = [0] * n
    own_segments: dict[int, list[tuple[int, int]]] = {}
    path_layer = facts.path_layer
    path_op = facts.path_op
    for i, s, e in path:
        d = e - s
        excl[i] += d
        name = spans[i].name
        path_op[name] = path_op.get(name, 0) + d
        layer = layers[i]
        path_layer[layer] = path_layer.get(layer, 0) + d
        if tree.children[i]:
            own_segments.setdefault(i, []).append((s, e))
    # Inclusive path per span (post-order), has-model per subtree, branch (child of the primary root) per span.
    incl = excl[:]
    has_model = [layer == "inference" for layer in layers]
    for i in reversed(order):
        p = tree.parent[i]
        if p >= 0:
            incl[p] += incl[i]
            if has_model[i]:
                has_model[p] = True
    primary = tree.primary
    branch_of: dict[int, int] = {}
    for i in order:
        p = tree.parent[i]
        if p == primary:
            branch_of[i] = i
        elif p >= 0 and p in branch_of:
            branch_of[i] = branch_of[p]
    root_name = root.name
    name_count: dict[str, int] = {}
    for sp in spans:
        name_count[sp.name] = name_count.get(sp.name, 0) + 1
    incl_op = facts.incl_op
    branch = facts.branch
    for i in order:
        if incl[i] <= 0 or i == primary or i not in branch_of:
            continue
        name = spans[i].name
        if name == root_name:
            continue
        # Count an operation nested in itself once: skip when an ancestor has the same name.
        p = tree.parent[i]
        nested = False
        while name_count[name] > 1 and p >= 0 and p != primary:
            if spans[p].name == name:
                nested = True
                break
            p = tree.parent[p]
        if nested:
            continue
        incl_op[name] = incl_op.get(name, 0) + incl[i]
        if name not in branch:
            branch[name] = spans[branch_of[i]].name
    # Per-operation self time, gaps, fan-out; retries.
    ops = facts.ops
    children = tree.children
    for i, sp in enumerate(spans):
        op = ops.get(sp.name)
        if op is None:
            op = ops[sp.name] = OpFacts()
        op.count += 1
        s0, e0 = sp.start_ns, sp.end_ns
        dur = e0 - s0
        op.duration_ns += dur
        kids = children[i]
        if not kids:
            op.self_ns += dur
            continue
        # One pass over the children (sorted by start): clipped union, and whether any two overlap.
        union: list[tuple[int, int]] = []
        clip: list[tuple[int, int]] = []
        overlap = False
        reach = s0
        for c in kids:
            k = spans[c]
            x, y = k.start_ns, k.end_ns
            if y <= s0 or x >= e0:
                continue
            if x < s0:
                x = s0
            if y > e0:
                y = e0
            clip.append((x, y))
            if union and x < reach:
                overlap = True
            if union and x <= union[-1][1]:
                if y > union[-1][1]:
                    union[-1] = (union[-1][0], y)
            else:
                union.append((x, y))
            if y > reach:
                reach = y
        busy = 0
        for x, y in union:
            busy += y - x
        op.self_ns += dur - busy
        op.gap_ns += dur - busy
        segs = own_segments.get(i)
        if segs:
            for x, y in segs:
                op.gap_path_ns += (y - x) - _overlap(union, x, y)
        if len(kids) > op.children:
            op.children = len(kids)
        width = (fanout_width(clip) if overlap else 1) if clip else 0
        if width > op.fanout:
            op.fanout = width
        if len(kids) > 1:
            _retries(tree, kids, incl, facts.retries)
    facts.waterfalls = find_waterfalls(tree, layers, has_model, incl, own_segments, async_blocking=async_blocking)
    return facts


def _retries(tree: TraceTree, kids: tuple[int, ...], incl: list[int], out: list[Retry]) -> None:
    """Runs of same-name siblings where each later one follows an error or carries ``http.request.resend_count``."""
    spans = tree.spans
    k = 0
    while k < len(kids):
        first = spans[kids[k]]
        j = k + 1
        cost = 0
        while j < len(kids):
            prev, cur = spans[kids[j - 1]], spans[kids[j]]
            if cur.name != first.name:
                break
            resend = cur.attributes.get("http.request.resend_count") if cur.attributes else None
            if prev.status != "ERROR" and not resend:
                break
            cost += incl[kids[j - 1]]
            j += 1
        if j - k > 1:
            out.append(Retry(op=first.name, attempts=j - k, cost_ns=cost))
        k = j


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
