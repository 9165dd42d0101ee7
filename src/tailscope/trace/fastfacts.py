"""Per-trace facts straight from store rows: the same result as ``trace_facts(build_tree(spans))``, faster.

For sets of tens of thousands of traces, building a :class:`~tailscope.records.Span` per row, a
:class:`~tailscope.trace.tree.TraceTree` per trace and walking them through the general functions costs more than the
analysis itself. :func:`facts_from_rows` does the same work (tree, default-policy critical path, layers, operation
totals, retries, waterfalls) on the columns of one trace's rows, with integer indices and no per-span objects.

It implements only the ``default`` critical-path policy and expects the rows of one trace sorted by
``(start_ns, end_ns, span_id)`` (the store reads them so). Its output equals the reference path's for the same rows
in the same order; ``tests/unit/trace/test_trace_fastfacts.py`` checks that on random trees (orphans, cycles,
duplicates, clipping, async children, retries, waterfalls).
"""

from __future__ import annotations

from collections.abc import Sequence

from tailscope.trace.facts import OpFacts, Retry, TraceFacts, fanout_width
from tailscope.trace.tree import break_cycles
from tailscope.trace.waterfall import CANDIDATE_LAYERS, WaterfallGroup, pattern_of

#: One store row: trace id, span id, parent id, name, start ns, end ns, service, kind, status, layer, follows-from,
#: ``http.request.resend_count`` (or None).
Row = tuple[str, str, str | None, str, int, int, str, str, str, str, bool, int | None]


def _dedupe(rows: Sequence[Row]) -> list[Row]:
    """The rows with repeated span ids dropped (the first one kept), like the tree builder."""
    seen: set[str] = set()
    kept: list[Row] = []
    for r in rows:
        if r[1] not in seen:
            seen.add(r[1])
            kept.append(r)
    return kept


def facts_from_rows(rows: Sequence[Row], *, async_blocking: bool = False) -> TraceFacts:
    """The facts of one trace (default critical-path policy) from its store rows.

    Args:
        rows: the rows of one trace, sorted by ``(start_ns, end_ns, span_id)``.
        async_blocking: treat follows-from and CONSUMER children as blocking.

    Returns:
        What ``trace_facts(build_tree(spans))`` returns for the same spans in the same order.
    """
    duplicates = 0
    if not rows:
        return TraceFacts(trace_id="", root_op="", duration_ns=0)
    tid = rows[0][0]
    cols = list(zip(*rows, strict=True))
    sids: tuple[str, ...] = cols[1]
    n = len(sids)
    index = {s: i for i, s in enumerate(sids)}
    if len(index) != n:
        kept = _dedupe(rows)
        duplicates = n - len(kept)
        cols = list(zip(*kept, strict=True))
        sids = cols[1]
        n = len(sids)
        index = {s: i for i, s in enumerate(sids)}
    pids: tuple[str | None, ...] = cols[2]
    names: tuple[str, ...] = cols[3]
    starts: tuple[int, ...] = cols[4]
    ends: tuple[int, ...] = cols[5]
    services: tuple[str, ...] = cols[6]
    kinds: tuple[str, ...] = cols[7]
    statuses: tuple[str, ...] = cols[8]
    layers0: tuple[str, ...] = cols[9]
    ffs: tuple[bool, ...] = cols[10]
    resends: tuple[int | None, ...] = cols[11]

    # -- tree: parents, orphans, cycles, children (already in (start, end, span id) order), roots ------------------
    parent = [-1] * n
    orphans: list[int] = []
    backward = False  # a parent after its child in time order: the only way a cycle can form
    get = index.get
    for i in range(n):
        pid = pids[i]
        if pid:
            p = get(pid, -1)
            if p < 0 or p == i:
                orphans.append(i)
            else:
                parent[i] = p
                if p > i:
                    backward = True
    cycles = len(break_cycles(parent, lambda j: (starts[j], sids[j]))) if backward else 0
    children: list[list[int] | None] = [None] * n
    roots: list[int] = []
    skew = overflow = 0
    for i in range(n):
        p = parent[i]
        if p < 0:
            roots.append(i)
            continue
        kids = children[p]
        if kids is None:
            children[p] = [i]
        else:
            kids.append(i)
        if starts[i] < starts[p] or ends[i] > ends[p]:
            if services[i] != services[p]:
                skew += 1
            else:
                overflow += 1
    if len(roots) == 1:
        primary = roots[0]
    else:
        orphan_set = set(orphans)
        true_roots = [r for r in roots if r not in orphan_set] or roots
        primary = min(true_roots, key=lambda r: (starts[r] - ends[r], starts[r], sids[r]))
    facts = TraceFacts(trace_id=tid, root_op=names[primary], duration_ns=ends[primary] - starts[primary], spans=n)
    anomalies = facts.anomalies
    for key, value in (
        ("orphans", len(orphans)),
        ("extra_roots", len(roots) - 1),
        ("cycles", cycles),
        ("skew", skew),
        ("overflow", overflow),
        ("duplicates", duplicates),
    ):
        if value:
            anomalies[key] = value

    # -- critical path (default policy), iterative like critical_path.raw_default_path ----------------------------
    blocking = [True] * n if async_blocking else [not (f or k == "CONSUMER") for f, k in zip(ffs, kinds, strict=True)]
    clipped = ignored = 0
    path: list[tuple[int, int, int]] = []

    def prepare(i: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        nonlocal clipped, ignored
        out: list[tuple[int, int, int]] = []
        kids = children[i]
        if kids is None:
            return out
        for c in kids:
            if not blocking[c]:
                continue
            cs = starts[c]
            ce = ends[c]
            if cs >= lo and ce <= hi:
                if ce > cs:
                    out.append((-ce, cs, c))
                continue
            if cs < lo:
                cs = lo
            if ce > hi:
                ce = hi
            if ce <= cs:
                ignored += 1
                continue
            clipped += 1
            out.append((-ce, cs, c))
        if len(out) > 1:
            out.sort()
        return out

    r0, r1 = starts[primary], ends[primary]
    stack: list[list[int | list[tuple[int, int, int]]]] = [[primary, r0, prepare(primary, r0, r1), 0, r1]]
    while stack:
        frame = stack[-1]
        fi: int = frame[0]  # type: ignore[assignment]
        flo: int = frame[1]  # type: ignore[assignment]
        fkids: list[tuple[int, int, int]] = frame[2]  # type: ignore[assignment]
        pos: int = frame[3]  # type: ignore[assignment]
        cursor: int = frame[4]  # type: ignore[assignment]
        descended = False
        nk = len(fkids)
        while pos < nk and cursor > flo:
            neg_end, cs, c = fkids[pos]
            pos += 1
            ce = -neg_end
            if ce > cursor:
                continue
            if cursor > ce:
                path.append((fi, ce, cursor))
            frame[3] = pos
            frame[4] = cs
            stack.append([c, cs, prepare(c, cs, ce), 0, ce])
            descended = True
            break
        if descended:
            continue
        if cursor > flo:
            path.append((fi, flo, cursor))
        stack.pop()
    path.reverse()
    if clipped:
        anomalies["clipped"] = clipped
    if ignored:
        anomalies["ignored"] = ignored

    # -- layers refined with the tree (facts.span_layers / layers.refine_layer) -----------------------------------
    layers = list(layers0)
    for i in range(n):
        layer = layers[i]
        if layer == "network":
            if kinds[i] == "CLIENT":
                kids = children[i]
                if kids is None or all(kinds[c] != "SERVER" for c in kids):
                    layers[i] = "business"
        elif layer == "gateway" and kinds[i] == "SERVER" and parent[i] >= 0:
            layers[i] = "business"

    # -- pre-order (parents before children, children in start order) --------------------------------------------
    order: list[int] = []
    todo = roots[::-1]
    while todo:
        i = todo.pop()
        order.append(i)
        kids = children[i]
        if kids is not None:
            todo.extend(reversed(kids))

    excl = [0] * n
    own_segments: dict[int, list[tuple[int, int]]] = {}
    path_layer = facts.path_layer
    path_op = facts.path_op
    for i, s, e in path:
        d = e - s
        excl[i] += d
        name = names[i]
        path_op[name] = path_op.get(name, 0) + d
        layer = layers[i]
        path_layer[layer] = path_layer.get(layer, 0) + d
        if children[i] is not None:
            segs = own_segments.get(i)
            if segs is None:
                own_segments[i] = [(s, e)]
            else:
                segs.append((s, e))
    incl = excl[:]
    has_model = [layer == "inference" for layer in layers]
    for i in reversed(order):
        p = parent[i]
        if p >= 0:
            incl[p] += incl[i]
            if has_model[i]:
                has_model[p] = True
    branch_of = [-1] * n
    for i in order:
        p = parent[i]
        if p == primary:
            branch_of[i] = i
        elif p >= 0 and branch_of[p] >= 0:
            branch_of[i] = branch_of[p]
    root_name = names[primary]
    name_count: dict[str, int] = {}
    for nm in names:
        name_count[nm] = name_count.get(nm, 0) + 1
    incl_op = facts.incl_op
    branch = facts.branch
    for i in order:
        if incl[i] <= 0 or i == primary or branch_of[i] < 0:
            continue
        name = names[i]
        if name == root_name:
            continue
        if name_count[name] > 1:
            p = parent[i]
            nested = False
            while p >= 0 and p != primary:
                if names[p] == name:
                    nested = True
                    break
                p = parent[p]
            if nested:
                continue
        incl_op[name] = incl_op.get(name, 0) + incl[i]
        if name not in branch:
            branch[name] = names[branch_of[i]]

    # -- per-operation self time, gaps, fan-out; retries ----------------------------------------------------------
    ops = facts.ops
    retries = facts.retries
    for i in range(n):
        name = names[i]
        op = ops.get(name)
        if op is None:
            op = ops[name] = OpFacts()
        op.count += 1
        s0 = starts[i]
        e0 = ends[i]
        dur = e0 - s0
        op.duration_ns += dur
        kids = children[i]
        if kids is None:
            op.self_ns += dur
            continue
        union: list[list[int]] = []
        clip: list[tuple[int, int]] = []
        overlap = False
        reach = s0
        last: list[int] | None = None
        for c in kids:
            x = starts[c]
            y = ends[c]
            if y <= s0 or x >= e0:
                continue
            if x < s0:
                x = s0
            if y > e0:
                y = e0
            clip.append((x, y))
            if last is not None:
                if x < reach:
                    overlap = True
                if x <= last[1]:
                    if y > last[1]:
                        last[1] = y
                else:
                    last = [x, y]
                    union.append(last)
            else:
                last = [x, y]
                union.append(last)
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
                covered = 0
                for u0, u1 in union:
                    if u1 <= x or u0 >= y:
                        continue
                    covered += (u1 if u1 < y else y) - (u0 if u0 > x else x)
                op.gap_path_ns += (y - x) - covered
        nk = len(kids)
        if nk > op.children:
            op.children = nk
        width = (fanout_width(clip) if overlap else 1) if clip else 0
        if width > op.fanout:
            op.fanout = width
        if nk > 1:
            k = 0
            while k < nk:
                first = names[kids[k]]
                j = k + 1
                cost = 0
                while j < nk:
                    cur = kids[j]
                    if names[cur] != first:
                        break
                    prev = kids[j - 1]
                    if statuses[prev] != "ERROR" and not resends[cur]:
                        break
                    cost += incl[prev]
                    j += 1
                if j - k > 1:
                    retries.append(Retry(op=first, attempts=j - k, cost_ns=cost))
                k = j

    # -- waterfalls (waterfall.find_waterfalls) -------------------------------------------------------------------
    groups = facts.waterfalls
    for p in range(n):
        kids = children[p]
        if kids is None or len(kids) < 2:
            continue
        candidates = 0
        for c in kids:
            if layers[c] in CANDIDATE_LAYERS and not has_model[c]:
                candidates += 1
        if candidates < 2:
            continue
        blk = [c for c in kids if blocking[c]]
        nb = len(blk)
        alone = [True] * nb
        max_end = -(2**63)
        for k in range(nb):
            c = blk[k]
            if starts[c] < max_end or (k + 1 < nb and starts[blk[k + 1]] < ends[c]):
                alone[k] = False
            if ends[c] > max_end:
                max_end = ends[c]
        run: list[int] = []
        runs: list[list[int]] = []
        run_end = 0
        prev_name = ""
        prev_error = False
        for k in range(nb):
            c = blk[k]
            if layers[c] not in CANDIDATE_LAYERS or has_model[c] or not alone[k]:
                if len(run) > 1:
                    runs.append(run)
                run = []
                continue
            name = names[c]
            retry = prev_error and prev_name == name
            prev_name, prev_error = name, statuses[c] == "ERROR"
            if run and starts[c] >= run_end and not retry:
                run.append(c)
                if ends[c] > run_end:
                    run_end = ends[c]
                continue
            if len(run) > 1:
                runs.append(run)
            run = [c]
            run_end = ends[c]
        if len(run) > 1:
            runs.append(run)
        for members in runs:
            w0 = starts[members[0]]
            w1 = longest = 0
            on_path = 0
            for m in members:
                if ends[m] > w1:
                    w1 = ends[m]
                if ends[m] - starts[m] > longest:
                    longest = ends[m] - starts[m]
                on_path += incl[m]
            local = (w1 - w0) - longest
            if local < 0:
                local = 0
            for s, e in own_segments.get(p, ()):
                if e > w0 and s < w1:
                    on_path += (e if e < w1 else w1) - (s if s > w0 else w0)
            groups.append(
                WaterfallGroup(
                    pattern=pattern_of(names[p], tuple(names[m] for m in members)),
                    parent_id=sids[p],
                    member_ids=tuple(sids[m] for m in members),
                    window_ns=w1 - w0,
                    local_saving_ns=local,
                    saving_ns=min(local, on_path),
                )
            )
    return facts
