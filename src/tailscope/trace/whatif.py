"""What-if: re-time every trace of a set under a change, before making it.

A change names operations (span names; ``*`` and ``?`` match like shell globs) and what happens to their spans:

``set-duration OP=30ms``
    each span of OP takes that long (its subtree no longer counts: the span is opaque).
``scale OP=0.6``
    each span of OP runs at that factor: its own time, its children's gaps and its subtree's spans scale by it.
``parallel A,B,C``
    sibling spans of those operations under one parent start together, when the first of them started; whatever
    waited for one of them waits for the latest-ending one instead (one operation: its repeated siblings).
``parallel-children OP``
    all children of each span of OP start together, when the first started.
``cache OP=HIT_RATE:HIT_DURATION``
    a seeded random share (the hit rate) of OP's spans take HIT_DURATION (opaque); the draw is a hash of the seed,
    trace id and span id, so the same trace hits the same way whatever order the traces come in.
``remove OP``
    OP's spans (and their subtrees) no longer run: each takes no time, the gaps around it stay, so what came after
    it moves earlier by its duration.
``cap-retries OP=N``
    of a retry run of OP (same-name siblings, each after an error or carrying a resend count) only the first N
    attempts run.
``timeout OP=3s[:FALLBACK]``
    a span of OP that (after the other changes) would run longer ends at the timeout, followed by the fallback's
    duration when given.

Re-timing follows the tree. Every span has an *anchor*: the latest-ending earlier sibling that ended at or before it
started (it waited for that one), else its parent's start; it keeps its *gap* to the anchor (scaled with its parent),
so B that started after A ended moves with A, and concurrent branches stay concurrent. A span with blocking children
ends its *tail* (its own time after its last blocking child ended) after the last of them ends again; a leaf keeps its
duration. Non-blocking children (follows-from, CONSUMER) are re-timed but never hold their parent. Without changes
every span keeps its times exactly. All changes apply together (their order does not matter).

Outcomes carry the trace's class (:func:`trace_class`: a span attribute, read on the primary root, else on the
earliest span carrying it), and the summary repeats the distributions per class when some trace has one.

The critical path is computed before and after (``default`` policy) on each trace; its *dominant operation* is the
non-root operation with the most exclusive path time. A trace whose dominant operation changed tells that another
branch became critical: making one leaf faster may leave the tail where it was.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tailscope.trace.changes import Change, matcher
from tailscope.trace.critical_path import raw_default_path
from tailscope.trace.tree import TraceTree

NS_PER_MS = 1_000_000


@dataclass(slots=True)
class _Rule:
    """What the changes do to spans of one operation name."""

    remove: bool = False
    duration: float | None = None  # set-duration (ns)
    scale: float = 1.0
    cache: tuple[float, float] | None = None  # (hit rate, hit duration ns)
    cap: int = 0
    timeout: tuple[float, float] | None = None  # (limit ns, fallback ns)
    groups: tuple[int, ...] = ()  # parallel groups this operation belongs to
    parallel_children: bool = False

    @property
    def active(self) -> bool:
        return bool(
            self.remove or self.duration is not None or self.scale != 1.0 or self.cache or self.cap or self.timeout
            or self.groups or self.parallel_children
        )  # fmt: skip


class Plan:
    """Changes compiled for re-timing: a rule per operation name, resolved once per name and cached."""

    def __init__(self, changes: Sequence[Change], *, seed: int = 0) -> None:
        self.changes = tuple(changes)
        self.seed = seed
        self._cache: dict[str, _Rule | None] = {}
        self._groups = [c for c in self.changes if c.kind == "parallel"]
        self._matchers = [(c, matcher(c.ops)) for c in self.changes]

    def rule(self, name: str) -> _Rule | None:
        got = self._cache.get(name, False)
        if got is not False:
            return got  # type: ignore[return-value]
        r = _Rule()
        for c, match in self._matchers:
            if not match(name):
                continue
            k = c.kind
            if k == "remove":
                r.remove = True
            elif k == "set-duration":
                r.duration = c.value
            elif k == "scale":
                r.scale *= c.value
            elif k == "cache":
                r.cache = (c.value, c.extra)
            elif k == "cap-retries":
                r.cap = int(c.value)
            elif k == "timeout":
                r.timeout = (c.value, c.extra)
            elif k == "parallel":
                r.groups = (*r.groups, self._groups.index(c))
            elif k == "parallel-children":
                r.parallel_children = True
        out = r if r.active else None
        self._cache[name] = out
        return out

    def hit(self, trace_id: str, span_id: str, rate: float) -> bool:
        """The seeded cache draw of one span (a hash: independent of the order traces come in)."""
        if rate >= 1.0:
            return True
        return zlib.crc32(f"{self.seed}:{trace_id}:{span_id}".encode()) < rate * 4294967296.0


@dataclass(frozen=True, slots=True)
class Retimed:
    """One trace re-timed: new start and end per span (ns, floats) and the spans that no longer run or count."""

    starts: list[float]
    ends: list[float]
    gone: list[bool]  # removed, or inside an opaque span (set-duration, cache hit)

    def duration_ns(self, i: int) -> float:
        return self.ends[i] - self.starts[i]


def _anchors(tree: TraceTree, kids: Sequence[int]) -> list[int]:
    """For each child (in start order), the earlier sibling it waited for: the latest-ending one that ended at or
    before it started (-1: none, it waited for its parent's start)."""
    starts, ends = tree.starts, tree.ends
    out: list[int] = []
    best_end = -(2**63)
    best = -1
    done: list[tuple[int, int]] = []  # (end, child) of earlier siblings not yet ended when last checked
    for c in kids:
        s = starts[c]
        if done:
            keep = []
            for e, j in done:
                if e <= s:
                    if e > best_end or (e == best_end and best < 0):
                        best_end, best = e, j
                else:
                    keep.append((e, j))
            done = keep
        out.append(best)
        done.append((ends[c], c))
    return out


def _retry_cut(tree: TraceTree, kids: Sequence[int], cap: Mapping[str, int]) -> list[int]:
    """Children beyond the first N attempts of a capped retry run (runs as :func:`~tailscope.trace.facts.find_retries`
    finds them)."""
    names, statuses, resends = tree.names, tree.statuses, tree.resends
    cut: list[int] = []
    k = 0
    while k < len(kids):
        name = names[kids[k]]
        j = k + 1
        while j < len(kids):
            cur, prev = kids[j], kids[j - 1]
            if names[cur] != name or (statuses[prev] != "ERROR" and not resends[cur]):
                break
            j += 1
        n = cap.get(name, 0)
        if n and j - k > n:
            cut.extend(kids[k + n : j])
        k = j
    return cut


def retime(tree: TraceTree, plan: Plan, anchors_of: dict[int, list[int]] | None = None) -> Retimed:
    """Re-time one trace under ``plan`` (see the module docstring). Only the primary root's tree is re-timed; other
    roots keep their times. ``anchors_of`` caches each parent's children's anchors across plans (they depend only on
    the tree: pass the same dict for the same tree)."""
    n = len(tree.span_ids)
    starts_o, ends_o = tree.starts, tree.ends
    new_s = [float(x) for x in starts_o]
    new_e = [float(x) for x in ends_o]
    gone = [False] * n
    root = tree.primary
    if root < 0:
        return Retimed(new_s, new_e, gone)
    names, children, blocking, sids = tree.names, tree.children, tree.blocking, tree.span_ids
    rules = [plan.rule(name) for name in names]
    if not any(rules):
        return Retimed(new_s, new_e, gone)
    factor = [1.0] * n
    removed = [False] * n
    opaque: list[float | None] = [None] * n
    for i, r in enumerate(rules):
        if r is None:
            continue
        if r.remove:
            removed[i] = True
        elif r.duration is not None:
            opaque[i] = r.duration
        elif r.cache is not None and plan.hit(tree.trace_id, sids[i], r.cache[0]):
            opaque[i] = r.cache[1]
    caps = {names[i]: r.cap for i, r in enumerate(rules) if r is not None and r.cap}

    def layout(p: int) -> tuple[list[int], list[tuple[int, int, int, int]]]:
        """Processing order of p's children and, for each, how its start is found: ``(mode, ref, gap_from, group)``
        with mode 0 = parent start + gap, 1 = sibling ``ref``'s end + gap, 2 = latest end of group ``ref`` + gap,
        3 = with the group's first member ``ref``; ``gap_from`` is the original anchor (-1: the parent's start)."""
        kids = children[p]
        if anchors_of is None:
            anchors = _anchors(tree, kids)
        else:
            got = anchors_of.get(p)
            if got is None:
                got = anchors_of[p] = _anchors(tree, kids)
            anchors = got
        if caps:
            for c in _retry_cut(tree, kids, caps):
                removed[c] = True
        group = [-1] * len(kids)
        rp = rules[p]
        if rp is not None and rp.parallel_children and len(kids) > 1:
            group = [0] * len(kids)
        else:
            for k, c in enumerate(kids):
                rc = rules[c]
                if rc is not None and rc.groups:
                    group[k] = 1 + rc.groups[0]
            counts: dict[int, int] = {}
            for g in group:
                if g >= 0:
                    counts[g] = counts.get(g, 0) + 1
            group = [g if g >= 0 and counts[g] > 1 else -1 for g in group]  # a group of one changes nothing
        if all(g < 0 for g in group):
            return list(kids), [(1 if a >= 0 else 0, a, a, -1) for a in anchors]
        pos = {c: k for k, c in enumerate(kids)}
        order: list[int] = []
        how: list[tuple[int, int, int, int]] = []
        placed: set[int] = set()
        for k, c in enumerate(kids):
            if c in placed:
                continue
            g = group[k]
            members = [kids[j] for j in range(k, len(kids)) if group[j] == g] if g >= 0 else [c]
            for m in members:
                placed.add(m)
                order.append(m)
                a = anchors[pos[m]]
                if g >= 0 and m != c:
                    how.append((3, c, a, g))
                elif a >= 0 and group[pos[a]] >= 0:
                    how.append((2, group[pos[a]], a, g))  # waited for a member: waits for the group's latest end
                else:
                    how.append((1 if a >= 0 else 0, a, a, g))
        return order, how

    # Iterative depth-first walk: a frame is [span, order, how, position, group ends, last child finished].
    def enter(i: int, start: float, f: float) -> list[Any] | None:
        """Set span i's start; finish it at once when it has nothing to walk (return None), else return its frame."""
        new_s[i] = start
        if removed[i]:
            new_e[i] = start
            _mark_gone(tree, i, gone)
            return None
        r = rules[i]
        if r is not None and r.scale != 1.0:
            f *= r.scale
        factor[i] = f
        d = opaque[i]
        if d is not None:
            new_e[i] = start + d
            for c in children[i]:
                _mark_gone(tree, c, gone)
            return None
        if not children[i]:
            finish(i, start + f * (ends_o[i] - starts_o[i]))
            return None
        order, how = layout(i)
        return [i, order, how, 0, {}, -1]

    def finish(i: int, end: float) -> None:
        r = rules[i]
        if r is not None and r.timeout is not None and end - new_s[i] > r.timeout[0]:
            end = new_s[i] + r.timeout[0] + r.timeout[1]
        new_e[i] = end if end >= new_s[i] else new_s[i]

    def close(frame: list[Any]) -> None:
        i = frame[0]
        last_o = -(2**63)
        last_n = None
        for c in children[i]:
            if blocking[c]:  # a removed child counts at the point it would have run (it takes no time)
                if ends_o[c] > last_o:
                    last_o = ends_o[c]
                if last_n is None or new_e[c] > last_n:
                    last_n = new_e[c]
        if last_n is None:
            finish(i, new_s[i] + factor[i] * (ends_o[i] - starts_o[i]))
        else:
            finish(i, last_n + factor[i] * (ends_o[i] - last_o))

    first = enter(root, new_s[root], 1.0)
    stack = [first] if first is not None else []
    while stack:
        frame = stack[-1]
        i, order, how, pos, group_end, done = frame
        if done >= 0:  # a child's subtree just finished: account its end to its group
            frame[5] = -1
            g = how[pos - 1][3]
            if g >= 0 and new_e[done] > group_end.get(g, -1e300):
                group_end[g] = new_e[done]
        if pos >= len(order):
            stack.pop()
            close(frame)
            if stack:
                stack[-1][5] = i
            continue
        c = order[pos]
        frame[3] = pos + 1
        mode, ref, gap_from, g = how[pos]
        f = factor[i]
        gap = starts_o[c] - (ends_o[gap_from] if gap_from >= 0 else starts_o[i])
        if mode == 3:
            start = new_s[ref]
        elif mode == 2:
            start = group_end.get(ref, new_s[i]) + f * gap
        elif mode == 1:
            start = new_e[ref] + f * gap
        else:
            start = new_s[i] + f * gap
        child = enter(c, start, f)
        if child is None:
            if g >= 0 and new_e[c] > group_end.get(g, -1e300):
                group_end[g] = new_e[c]
        else:
            stack.append(child)
    return Retimed(new_s, new_e, gone)


def _mark_gone(tree: TraceTree, i: int, gone: list[bool]) -> None:
    todo = [i]
    while todo:
        j = todo.pop()
        gone[j] = True
        todo.extend(tree.children[j])


def dominant_op(tree: TraceTree, starts: Sequence[int] | None = None, ends: Sequence[int] | None = None,
                gone: Sequence[bool] | None = None) -> str:  # fmt: skip
    """The non-root operation with the most exclusive critical-path time (``""`` when the root owns it all), on the
    original times or on re-timed ones (spans in ``gone`` dropped)."""
    if tree.primary < 0:
        return ""
    t = tree
    if starts is not None and ends is not None:
        kids: list[Sequence[int]] = list(tree.children)
        if gone is not None and any(gone):
            kids = [[c for c in k if not gone[c]] if k else k for k in kids]
        t = replace(tree, starts=starts, ends=ends, children=kids)
    path, _, _ = raw_default_path(t, t.primary)
    per_op: dict[str, int] = {}
    names, root = t.names, t.primary
    for i, s, e in path:
        if i != root:
            per_op[names[i]] = per_op.get(names[i], 0) + (e - s)
    return max(per_op, key=lambda k: (per_op[k], k)) if per_op else ""


@dataclass(frozen=True, slots=True)
class TraceOutcome:
    """One trace before and after: root operation, durations (ns), dominant critical-path operations and class
    (None: the trace names none)."""

    root_op: str
    before_ns: float
    after_ns: float
    before_path: str = ""
    after_path: str = ""
    klass: str | None = None


def project_trace(
    tree: TraceTree,
    plan: Plan,
    *,
    paths: bool = True,
    anchors_of: dict[int, list[int]] | None = None,
    names: Iterable[str] | None = None,
    klass: str | None = None,
) -> TraceOutcome | None:
    """One trace's outcome under ``plan`` (None for an empty tree); ``anchors_of`` as in :func:`retime`; ``names``
    (the tree's distinct span names, when known) lets a trace no change touches skip the re-timing; ``klass`` is the
    trace's class, carried into the outcome."""
    p = tree.primary
    if p < 0:
        return None
    if names is not None and not paths and not any(plan.rule(n) for n in names):
        d = float(tree.ends[p] - tree.starts[p])
        return TraceOutcome(tree.names[p], d, d, klass=klass)
    rt = retime(tree, plan, anchors_of)
    before = float(tree.ends[p] - tree.starts[p])
    after = rt.ends[p] - rt.starts[p]
    if not paths:
        return TraceOutcome(tree.names[p], before, after, klass=klass)
    b = dominant_op(tree)
    if after == before and not any(rt.gone) and rt.starts == [float(x) for x in tree.starts]:
        a = b
    else:
        a = dominant_op(tree, [round(x) for x in rt.starts], [round(x) for x in rt.ends], rt.gone)
    return TraceOutcome(tree.names[p], before, after, b, a, klass)


def trace_class(tree: TraceTree, values: Mapping[str, str] | None) -> str | None:
    """A trace's class from ``values`` (span id → the class attribute's value, for the spans that carry it): the
    primary root's value, else that of the earliest span carrying one (None when no span does)."""
    if not values:
        return None
    if tree.primary >= 0:
        got = values.get(tree.span_ids[tree.primary])
        if got is not None:
            return got
    for sid in tree.span_ids:  # in start order
        got = values.get(sid)
        if got is not None:
            return got
    return None


# --------------------------------------------------------------------------------------------------- summaries


STATS = ("p50", "p95", "p99")


def _quantiles(values: np.ndarray) -> dict[str, float]:
    qs = np.quantile(values, [0.5, 0.95, 0.99]) if values.size else [float("nan")] * 3
    return {s: float(q) for s, q in zip(STATS, qs, strict=True)}


def distribution(values_ns: np.ndarray, *, resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """p50/p95/p99 (ms) with bootstrap percentile intervals (``{stat}_low_ms``/``{stat}_high_ms``), mean and count."""
    from tailscope.verify.bootstrap import percentile_replicates

    ms = values_ns / NS_PER_MS
    out: dict[str, Any] = {"count": int(ms.size)}
    if ms.size == 0:
        return out
    point = _quantiles(ms)
    alpha = (1.0 - confidence) / 2.0
    for stat in STATS:
        out[f"{stat}_ms"] = round(point[stat], 3)
        if resamples > 0 and ms.size > 1:
            reps = percentile_replicates(ms, stat, resamples, np.random.default_rng(seed))
            lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
            out[f"{stat}_low_ms"] = round(float(lo), 3)
            out[f"{stat}_high_ms"] = round(float(hi), 3)
    out["mean_ms"] = round(float(ms.mean()), 3)
    return out


@dataclass
class Projection:
    """Outcomes of a set under one plan, summarised."""

    outcomes: list[TraceOutcome] = field(default_factory=list)

    def arrays(self, root_op: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        return _arrays([o for o in self.outcomes if root_op is None or o.root_op == root_op])

    def summary(self, *, resamples: int = 200, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
        """``before``, ``after`` (:func:`distribution`), ``saving`` (ms per stat), ``root_ops`` (the same per root
        operation), ``classes`` (the same per class, with ``count``, when some trace has a class: traces without one
        are ``(none)``; absent otherwise), ``critical_path`` (share of traces whose dominant path operation changed,
        and to what) and ``distribution`` (the root durations' percentiles 0, 1, …, 100 before and after, ms: the
        CDFs)."""
        before, after = self.arrays()
        doc: dict[str, Any] = _pair(before, after, resamples, confidence, seed)
        ops: dict[str, int] = {}
        for o in self.outcomes:
            ops[o.root_op] = ops.get(o.root_op, 0) + 1
        if len(ops) > 1:
            doc["root_ops"] = {
                op: _pair(*self.arrays(op), resamples, confidence, seed)
                for op in sorted(ops, key=lambda k: (-ops[k], k))
            }
        else:
            doc["root_ops"] = {op: {k: doc[k] for k in ("before", "after", "saving")} for op in ops}
        by_class: dict[str, list[TraceOutcome]] = {}
        for o in self.outcomes:
            by_class.setdefault(NO_CLASS if o.klass is None else o.klass, []).append(o)
        if set(by_class) - {NO_CLASS}:
            doc["classes"] = {
                k: {"count": len(rows), **_pair(*_arrays(rows), resamples, confidence, seed)}
                for k, rows in sorted(by_class.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            }
        doc["critical_path"] = self.path_changes()
        if before.size:
            qs = np.linspace(0.0, 1.0, 101)
            doc["distribution"] = {
                "quantiles": [round(float(q), 2) for q in qs],
                "before_ms": [round(float(v) / NS_PER_MS, 3) for v in np.quantile(before, qs)],
                "after_ms": [round(float(v) / NS_PER_MS, 3) for v in np.quantile(after, qs)],
            }
        return doc

    def path_changes(self) -> dict[str, Any]:
        moves: dict[tuple[str, str], int] = {}
        n = changed = 0
        for o in self.outcomes:
            if not (o.before_path or o.after_path):
                continue
            n += 1
            if o.before_path != o.after_path:
                changed += 1
                key = (o.before_path, o.after_path)
                moves[key] = moves.get(key, 0) + 1
        top = sorted(moves.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        return {
            "traces": n,
            "changed": changed,
            "changed_share": round(changed / n, 4) if n else 0.0,
            "moves": [{"from": a or "(root)", "to": b or "(root)", "traces": k, "share": round(k / n, 4)}
                      for (a, b), k in top],
        }  # fmt: skip


#: The class of traces without one, beside traces with one.
NO_CLASS = "(none)"


def _arrays(rows: Sequence[TraceOutcome]) -> tuple[np.ndarray, np.ndarray]:
    before = np.fromiter((o.before_ns for o in rows), dtype=np.float64, count=len(rows))
    after = np.fromiter((o.after_ns for o in rows), dtype=np.float64, count=len(rows))
    return before, after


def _pair(before: np.ndarray, after: np.ndarray, resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    b = distribution(before, resamples=resamples, confidence=confidence, seed=seed)
    a = distribution(after, resamples=resamples, confidence=confidence, seed=seed)
    saving = {f"{s}_ms": round(b[f"{s}_ms"] - a[f"{s}_ms"], 3) for s in STATS if f"{s}_ms" in b}
    return {"before": b, "after": a, "saving": saving}


def project(
    trees: Iterable[TraceTree],
    changes: Sequence[Change],
    *,
    seed: int = 0,
    paths: bool = True,
    anchors: dict[int, dict[int, list[int]]] | None = None,
    names_of: dict[int, frozenset[str]] | None = None,
    classes: Sequence[str | None] | None = None,
) -> Projection:
    """Re-time every trace under ``changes`` together. ``anchors`` (trace's ``id()`` → its anchor cache) and
    ``names_of`` (→ its distinct span names) speed up projecting the same trees again under other changes (the
    ranking does: a trace no change touches is not re-timed); the trees must outlive them. ``classes``: each
    tree's class, in the trees' order (carried into the outcomes)."""
    plan = Plan(changes, seed=seed)
    out = Projection()
    for k, tree in enumerate(trees):
        cache = None
        names = None
        if anchors is not None:
            cache = anchors.get(id(tree))
            if cache is None:
                cache = anchors[id(tree)] = {}
        if names_of is not None:
            names = names_of.get(id(tree))
            if names is None:
                names = names_of[id(tree)] = frozenset(tree.names)
        klass = classes[k] if classes is not None else None
        o = project_trace(tree, plan, paths=paths, anchors_of=cache, names=names, klass=klass)
        if o is not None:
            out.outcomes.append(o)
    return out
