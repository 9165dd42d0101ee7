"""The reference implementation of the per-trace facts: the test oracle the production path is checked against.

Written for clarity, not speed: spans become a :class:`RefTree` of :class:`~tailscope.records.Span` objects, and the
critical path, layers, operation totals, retries and waterfalls are computed by the plain functions below, one
concept each, exactly as ``docs/trace.md`` states them. The production path (:mod:`tailscope.trace.tree`,
:mod:`tailscope.trace.facts`) works on columns of store rows and must give identical :class:`TraceFacts` on any
input; ``test_trace_oracle.py`` checks that on random messy trees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tailscope.records import Span
from tailscope.trace.facts import OpFacts, Retry, TraceFacts
from tailscope.trace.layers import refine_layer
from tailscope.trace.waterfall import CANDIDATE_LAYERS, WaterfallGroup, pattern_of

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
class RefTree:
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


def build_tree(spans: Sequence[Span], trace_id: str | None = None) -> RefTree:
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
    return RefTree(
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


def raw_default_path(
    tree: RefTree, root: int, *, async_blocking: bool = False
) -> tuple[list[tuple[int, int, int]], list[int], list[int]]:
    """The default policy as raw ``(span index, start, end)`` triples in time order, plus clipped and ignored indices.

    Iterative (no recursion limit on deep trees); cost O(n log n) in the number of spans under ``root``.
    """
    spans = tree.spans
    children = tree.children
    out: list[tuple[int, int, int]] = []
    clipped: list[int] = []
    ignored: list[int] = []

    def prepare(i: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        kids: list[tuple[int, int, int]] = []
        for c in children[i]:
            if not async_blocking and not tree.is_blocking(c):
                continue
            s = spans[c]
            cs, ce = s.start_ns, s.end_ns
            if cs >= lo and ce <= hi:
                if ce > cs:
                    kids.append((-ce, cs, c))
                continue
            cs2, ce2 = max(cs, lo), min(ce, hi)
            if ce2 <= cs2:
                ignored.append(c)
                continue
            clipped.append(c)
            kids.append((-ce2, cs2, c))
        kids.sort()
        return kids

    r = spans[root]
    # frame: [span index, lo, sorted kids, position, cursor]
    stack: list[list[object]] = [[root, r.start_ns, prepare(root, r.start_ns, r.end_ns), 0, r.end_ns]]
    while stack:
        frame = stack[-1]
        i: int = frame[0]  # type: ignore[assignment]
        lo: int = frame[1]  # type: ignore[assignment]
        kids: list[tuple[int, int, int]] = frame[2]  # type: ignore[assignment]
        pos: int = frame[3]  # type: ignore[assignment]
        cursor: int = frame[4]  # type: ignore[assignment]
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


def raw_jaeger_path(tree: RefTree, *, async_blocking: bool = False) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Jaeger UI's critical-path sections as raw ``(span index, start, end)`` triples, plus dropped child indices.

    Sections come in Jaeger's emission order (backwards in time within a root), roots in start order.
    """
    spans = tree.spans
    n = len(spans)
    start = [s.start_ns for s in spans]
    end = [s.end_ns for s in spans]
    alive = [True] * n
    kids: list[list[int]] = [list(k) for k in tree.children]
    dropped: list[int] = []
    sections: list[tuple[int, int, int]] = []
    for root in tree.roots:
        # Pre-order walk: a parent is sanitised before its children, so clipping cascades like Jaeger's map order.
        order: list[int] = []
        todo = [root]
        while todo:
            i = todo.pop()
            order.append(i)
            keep: list[int] = []
            for c in kids[i]:
                if not async_blocking and not tree.is_blocking(c):
                    continue  # non-blocking subtree removed (never visited)
                keep.append(c)
            kids[i] = keep
            todo.extend(reversed(keep))
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
    return sections, dropped


def span_layers(tree: RefTree) -> list[str]:
    """Each span's layer, refined with the tree (a CLIENT call without a SERVER child is an external API; an LLM
    CLIENT call with one is the network)."""
    spans = tree.spans
    out: list[str] = []
    for i, s in enumerate(spans):
        layer = s.layer
        if layer in ("network", "gateway") or (layer == "inference" and s.kind == "CLIENT"):
            kinds = [spans[c].kind for c in tree.children[i]]
            layer = refine_layer(layer, s.kind, kinds, is_root=tree.parent[i] < 0)
        out.append(layer)
    return out


def _preorder(tree: RefTree) -> list[int]:
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


def reference_facts(
    tree: RefTree,
    *,
    policy: str = "default",
    async_blocking: bool = False,
    consumes: Mapping[str, set[str]] | None = None,
) -> TraceFacts:
    """Compute the per-trace facts of one tree under a critical-path policy (``consumes``: span id → ids of the
    spans whose output it consumes)."""
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
    facts.waterfalls = find_waterfalls(
        tree, layers, has_model, incl, own_segments, async_blocking=async_blocking, consumes=consumes or {}
    )
    return facts


def _retries(tree: RefTree, kids: tuple[int, ...], incl: list[int], out: list[Retry]) -> None:
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


def find_waterfalls(
    tree: RefTree,
    layers: Sequence[str],
    has_model: Sequence[bool],
    incl: Sequence[int],
    own_segments: Mapping[int, Sequence[tuple[int, int]]],
    *,
    async_blocking: bool = False,
    consumes: Mapping[str, set[str]] | None = None,
) -> list[WaterfallGroup]:
    """All waterfall groups of one trace (a member that consumes an earlier member's output starts a new run).

    Args:
        tree: the trace.
        layers: layer of each span (by index).
        has_model: whether each span's subtree contains an inference span.
        incl: each span's inclusive critical-path time (its subtree's path segments), ns.
        own_segments: for spans with children, their own critical-path segments ``(start, end)``.
        async_blocking: treat async children as blocking.
    """
    spans = tree.spans
    groups: list[WaterfallGroup] = []
    for p, kids in enumerate(tree.children):
        if len(kids) < 2:
            continue
        candidates = 0
        for c in kids:
            if layers[c] in CANDIDATE_LAYERS and not has_model[c]:
                candidates += 1
        if candidates < 2:
            continue
        blocking = [c for c in kids if async_blocking or tree.is_blocking(c)]
        # A member must have run alone: it overlaps no other sibling (a concurrent batch is not a waterfall).
        # Siblings are sorted by start, so only the running max end before k and the next start matter.
        n = len(blocking)
        alone = [True] * n
        max_end = -(2**63)
        for k, c in enumerate(blocking):
            s = spans[c]
            if s.start_ns < max_end or (k + 1 < n and spans[blocking[k + 1]].start_ns < s.end_ns):
                alone[k] = False
            max_end = max(max_end, s.end_ns)
        run: list[int] = []
        runs: list[list[int]] = []
        run_end = 0
        prev_name = ""
        prev_error = False
        for k, c in enumerate(blocking):
            s = spans[c]
            if layers[c] not in CANDIDATE_LAYERS or has_model[c] or not alone[k]:
                if len(run) > 1:
                    runs.append(run)
                run = []
                continue
            retry = prev_error and prev_name == s.name
            prev_name, prev_error = s.name, s.status == "ERROR"
            used = (consumes or {}).get(s.span_id, set())
            consumer = any(spans[m].span_id in used for m in run)
            if run and s.start_ns >= run_end and not retry and not consumer:
                run.append(c)
                if s.end_ns > run_end:
                    run_end = s.end_ns
                continue
            if len(run) > 1:
                runs.append(run)
            run = [c]
            run_end = s.end_ns
        if len(run) > 1:
            runs.append(run)
        for members in runs:
            groups.append(_group(tree, p, members, incl, own_segments.get(p, ())))
    return groups


def _group(
    tree: RefTree,
    p: int,
    members: list[int],
    incl: Sequence[int],
    parent_segments: Sequence[tuple[int, int]],
) -> WaterfallGroup:
    spans = tree.spans
    w0 = spans[members[0]].start_ns
    w1 = longest = 0
    for m in members:
        sm = spans[m]
        if sm.end_ns > w1:
            w1 = sm.end_ns
        if sm.end_ns - sm.start_ns > longest:
            longest = sm.end_ns - sm.start_ns
    local = (w1 - w0) - longest
    if local < 0:
        local = 0
    # Path time in the window owned by the members' subtrees (they lie inside it) or by the parent itself.
    on_path = sum(incl[m] for m in members)
    for s, e in parent_segments:
        if e > w0 and s < w1:
            on_path += min(e, w1) - max(s, w0)
    parent = spans[p]
    return WaterfallGroup(
        pattern=pattern_of(parent.name, tuple(spans[m].name for m in members)),
        parent_id=parent.span_id,
        member_ids=tuple(spans[m].span_id for m in members),
        window_ns=w1 - w0,
        local_saving_ns=local,
        saving_ns=min(local, on_path),
    )


def oracle_facts(
    spans: Sequence[Span],
    *,
    policy: str = "default",
    async_blocking: bool = False,
    consumes: Mapping[str, set[str]] | None = None,
) -> TraceFacts:
    """The reference facts of one trace's spans."""
    return reference_facts(build_tree(spans), policy=policy, async_blocking=async_blocking, consumes=consumes)
