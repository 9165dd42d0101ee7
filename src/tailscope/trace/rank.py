"""Rank fixes by what they buy: candidate changes from a set's findings, each projected alone and in greedy order.

Candidates (each is a :class:`~tailscope.trace.whatif.Change` a user could pass by hand):

``parallelise``
    a waterfall (sibling calls one after another, :mod:`tailscope.trace.waterfall`): its operations that the
    dependency evidence (:mod:`tailscope.trace.dependency`) does not keep apart run together (``--parallel``). When
    the evidence only *assumes* them independent (always the same order, nothing marks it either way) the candidate
    is listed as such and left out of the greedy order until ``--independent`` confirms it.
``shorten-sync``
    a synchronous gateway step (the lowest gateway-layer spans below the root, e.g. ``auth`` under ``gateway``, or a
    leaf child of the root in the root's own service that is no model, tool or retrieval call; under a client's
    CLIENT root, such as a bench client span, the server's root counts as the root) taking ≥ :data:`SYNC_MIN_MS` on
    average in ≥ a quarter of the traces: made asynchronous or cached, it would take :data:`SYNC_TARGET_MS`
    (``--set-duration``).
``cap-retries``
    a retried operation: only the first attempt runs (``--cap-retries OP=1``).
``cache``
    an operation called again under the same parent in the same trace (a repeated tool call): the repeats become
    cache hits of :data:`CACHE_HIT_MS` (``--cache OP=REPEAT_SHARE:1ms``; arguments are not compared).
``scale``
    the operations with the largest share of the ≥ p95 traces' critical path, made :data:`SCALE_FACTOR` × as slow
    (``--scale OP=0.5``: twice as fast).

Each is projected alone over the whole set; then, greedily, the one that lowers P95 most given those already taken
is added, until none lowers it further — the order a team would ship them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.trace.analysis import buckets, composition
from tailscope.trace.changes import Change, parse_change
from tailscope.trace.dependency import Evidence, Marks
from tailscope.trace.facts import TraceFacts, span_layers, trace_facts
from tailscope.trace.tree import TraceTree
from tailscope.trace.waterfall import CANDIDATE_LAYERS
from tailscope.trace.whatif import NO_CLASS, NS_PER_MS, project

SYNC_MIN_MS = 20.0
SYNC_TARGET_MS = 5.0
CACHE_HIT_MS = 1.0
SCALE_FACTOR = 0.5
MAX_CANDIDATES = 12
GREEDY_STEPS = 5


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate fix: its kind, operations, the change that reproduces it and the evidence behind it."""

    kind: str
    change: Change
    evidence: str
    established: bool = True  # False: a parallelisation only assumed (no data shows the calls independent)


@dataclass
class _Reuse:
    """What every projection of the same trees shares: each tree's anchors and distinct span names, and each tree's
    class (None when no tree has one: no breakdown)."""

    anchors: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    names: dict[int, frozenset[str]] = field(default_factory=dict)
    classes: Sequence[str | None] | None = None


def _p95_ms(values_ns: Sequence[float] | np.ndarray) -> float:
    arr = np.asarray(values_ns, dtype=np.float64)
    return float(np.quantile(arr, 0.95)) / NS_PER_MS if arr.size else 0.0


def _p95(
    trees: Sequence[TraceTree], changes: Sequence[Change], seed: int, reuse: _Reuse
) -> tuple[float, dict[str, float]]:
    """P95 after ``changes`` (ms) over the set and per class (``{}`` without classes)."""
    proj = project(trees, changes, seed=seed, paths=False, anchors=reuse.anchors, names_of=reuse.names,
                   classes=reuse.classes)  # fmt: skip
    _, after = proj.arrays()
    by_class: dict[str, list[float]] = {}
    if reuse.classes is not None:
        for o in proj.outcomes:
            by_class.setdefault(NO_CLASS if o.klass is None else o.klass, []).append(o.after_ns)
    order = sorted(by_class, key=lambda k: (-len(by_class[k]), k))
    return _p95_ms(after), {k: round(_p95_ms(by_class[k]), 3) for k in order}


def _class_savings(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, dict[str, float]]:
    return {k: {"p95_after_ms": after[k], "p95_saving_ms": round(before[k] - after[k], 3)} for k in before}


def set_facts_with_marks(
    trees: Sequence[TraceTree], marks: Mapping[str, Marks], *, async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts whose waterfalls never hold a call that consumes an earlier member's output."""
    out = []
    for t in trees:
        m = marks.get(t.trace_id)
        out.append(trace_facts(t, async_blocking=async_blocking, consumes=m.by_index(t) if m else None))
    return out


def candidates(trees: Sequence[TraceTree], facts: Sequence[TraceFacts], evidence: Evidence) -> list[Candidate]:
    """Candidate fixes from the findings of a set (``facts``: one per tree, in the same order)."""
    out: list[Candidate] = []
    n = len(facts) or 1
    out.extend(_waterfalls(facts, evidence, n))
    out.extend(_sync_steps(trees, facts))
    retried: dict[str, int] = {}
    for f in facts:
        for op in {r.op for r in f.retries}:  # traces, not retry runs (a trace may retry an operation twice)
            retried[op] = retried.get(op, 0) + 1
    for op, k in sorted(retried.items(), key=lambda kv: -kv[1])[:3]:
        out.append(Candidate("cap-retries", parse_change("cap-retries", f"{op}=1"),
                             f"retried in {k / n:.0%} of traces"))  # fmt: skip
    out.extend(_repeats(trees))
    bks = buckets(facts)
    if "tail_p95_bucket" in bks:
        comp = composition(bks["tail_p95_bucket"], "path_op")
        roots = {f.root_op for f in facts}
        for op, row in list(comp.items())[:6]:
            if op in roots or row["share"] < 0.05:
                continue
            why = (
                f"{row['share']:.0%} of the ≥ p95 traces' critical path ({row['ms_per_trace']:.0f} ms per trace); "
                f"projected {1 / SCALE_FACTOR:g}× faster"
            )
            out.append(Candidate("scale", parse_change("scale", f"{op}={SCALE_FACTOR:g}"), why))
            if sum(c.kind == "scale" for c in out) >= 3:
                break
    return out[:MAX_CANDIDATES]


def _waterfalls(facts: Sequence[TraceFacts], evidence: Evidence, n: int) -> list[Candidate]:
    groups: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for t, f in enumerate(facts):
        for g in f.waterfalls:
            parent, _, listed = g.pattern.partition(" → ")
            key = (parent, tuple(listed.split(", ")))
            acc = groups.setdefault(key, [set(), 0])
            acc[0].add(t)
            acc[1] += g.saving_ns
    # one candidate per parent and set of operations (orders vary across traces: that is evidence, not a new group);
    # counted in traces (a trace may run the same waterfall twice, e.g. under two agent steps of the same name)
    merged: dict[tuple[str, frozenset[str]], list[Any]] = {}
    for (parent, members), (seen, saving) in groups.items():
        m = merged.setdefault((parent, frozenset(members)), [set(), 0, members])
        m[0] |= seen
        m[1] += saving
    out: list[Candidate] = []
    for (parent, _), (traces, _, members) in sorted(merged.items(), key=lambda kv: -kv[1][1])[:3]:
        k = len(traces)
        kept, dropped = evidence.split(parent, members)
        repeated = len(set(members)) < len(members)
        if len(kept) < 2 and not (repeated and kept):
            continue
        why = [f"sequential under {parent} in {k / n:.0%} of traces"]
        # the largest run-order subset the data shows independent; the rest only assumed
        sure: list[str] = []
        for first in range(len(kept)):  # a few operations: try each as the seed of a greedy clique, keep the largest
            clique = [kept[first]]
            for op in kept[first + 1 :]:
                if all(evidence.verdict(parent, o, op).kind == "independent" for o in clique):
                    clique.append(op)
            if len(clique) > len(sure):
                sure = clique
        established = len(sure) >= 2
        if established and len(sure) < len(kept):
            left = [op for op in kept if op not in sure]
            why.append(f"{', '.join(left)} left out: only assumed independent (add with --independent)")
            kept = sure
        verdicts = [evidence.verdict(parent, a, b) for i, a in enumerate(kept) for b in kept[i + 1 :]]
        if not established:
            flag = "--independent " + '"' + ",".join(sorted(kept)) + '"'
            why.insert(0, f"assumed independent, nothing in the data shows it (confirm with {flag})")
        why.extend(_summarise(verdicts))
        why.extend(f"{op} kept after: {v.reason}" for op, v in dropped)
        follower = _consumers(evidence, parent, kept, members)
        why.extend(f"{op} kept after: {v.reason}" for op, v in follower)
        change = parse_change("parallel", ",".join(sorted(kept)))
        out.append(Candidate("parallelise", change, "; ".join(why), established))
    return out


_REASONS = (
    ("order varies", "order varies across traces for every pair (neither waits for the other)"),
    ("overlapped", "every pair overlapped in some traces (they already ran together)"),
    ("consumed together", "a later call consumes them together and none consumes another (inputs of one join)"),
    ("parallel tool calls", "marked as parallel tool calls"),
)


def _summarise(verdicts: Sequence[Any]) -> list[str]:
    """The pairs' reasons, one line when every pair has the same kind of reason."""
    for key, line in _REASONS:
        if verdicts and all(key in v.reason for v in verdicts):
            return [line]
    return sorted({v.reason for v in verdicts})


def _consumers(evidence: Evidence, parent: str, kept: Sequence[str], members: Sequence[str]) -> list[tuple[str, Any]]:
    """Siblings outside the group that the evidence keeps after it (e.g. a rerank consuming the searches, which the
    waterfall finder already left out of the group): named so the user sees why they are not in it."""
    out: list[tuple[str, Any]] = []
    for (p, a, b), _ in evidence.pairs.items():
        if p != parent:
            continue
        for other, member in ((a, b), (b, a)):
            if member in kept and other not in members and other not in (o for o, _ in out):
                v = evidence.verdict(parent, member, other)
                if v.kind == "dependent":
                    out.append((other, v))
    return out


#: Layers whose leaf calls under the root are the request's work, not a gateway step before it (a model call, a tool
#: call, a retrieval in the gateway's own process).
_NOT_SYNC_STEPS = frozenset({"inference", "agent", "retrieval"})


def _sync_steps(trees: Sequence[TraceTree], facts: Sequence[TraceFacts]) -> list[Candidate]:
    """Blocking steps of the gateway: the lowest gateway-layer spans below the root (an ``auth`` under ``gateway``),
    and leaf children of the root in the root's own service."""
    total: dict[str, list[int]] = {}
    for t in trees:
        r = t.primary
        if r < 0:
            continue
        r = _server_root(t, r)
        service, layers, children = t.services[r], t.layers, t.children
        todo = list(children[r])
        while todo:
            c = todo.pop()
            kids = children[c]
            if layers[c] == "gateway":
                if any(layers[k] == "gateway" for k in kids):
                    todo.extend(kids)  # a wrapper: its gateway steps are the candidates
                    continue
            elif kids or t.parent[c] != r or t.services[c] != service or layers[c] in _NOT_SYNC_STEPS:
                continue
            if not t.blocking[c]:
                continue
            acc = total.setdefault(t.names[c], [0, 0])
            acc[0] += 1
            acc[1] += t.ends[c] - t.starts[c]
    out = []
    for op, (k, ns) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        mean_ms = ns / k / NS_PER_MS
        if mean_ms >= SYNC_MIN_MS and k >= len(trees) // 4:
            out.append(Candidate("shorten-sync", parse_change("set-duration", f"{op}={SYNC_TARGET_MS:g}ms"),
                                 f"a synchronous gateway step before the request goes on: {mean_ms:.0f} ms on "
                                 f"average; made async or cached it would take {SYNC_TARGET_MS:g} ms"))  # fmt: skip
    return out[:2]


def _server_root(tree: TraceTree, r: int) -> int:
    """The span the gateway's steps hang under: a CLIENT root with one SERVER child (the caller's span, e.g. the one
    ``bench --otlp-endpoint`` sends above the server's tree) is the wire in front of that server, whose steps are the
    candidates (not the server's whole request)."""
    kinds, children = tree.kinds, tree.children
    while kinds[r] == "CLIENT":
        servers = [c for c in children[r] if kinds[c] == "SERVER"]
        if len(servers) != 1:
            break
        r = servers[0]
    return r


def _repeats(trees: Sequence[TraceTree]) -> list[Candidate]:
    calls: dict[str, list[int]] = {}
    for t in trees:
        layers = span_layers(t)
        names, statuses = t.names, t.statuses
        for kids in t.children:
            if len(kids) < 2:
                continue
            seen: set[str] = set()
            prev_error: dict[str, bool] = {}
            for c in kids:
                name = names[c]
                if layers[c] not in CANDIDATE_LAYERS:
                    continue
                acc = calls.setdefault(name, [0, 0])
                acc[0] += 1
                if name in seen and not prev_error.get(name):
                    acc[1] += 1
                seen.add(name)
                prev_error[name] = statuses[c] == "ERROR"
    out = []
    for op, (k, rep) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
        share = rep / k
        if rep and share >= 0.1:
            out.append(Candidate("cache", parse_change("cache", f"{op}={share:.2f}:{CACHE_HIT_MS:g}ms"),
                                 f"{share:.0%} of {op} calls repeat an earlier call under the same parent "
                                 "(arguments not compared): those become cache hits"))  # fmt: skip
    return out[:2]


def rank(
    trees: Sequence[TraceTree],
    facts: Sequence[TraceFacts],
    evidence: Evidence,
    *,
    base: Sequence[Change] = (),
    seed: int = 0,
    classes: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """Candidates projected alone (on top of ``base``, the changes already given) and in greedy order.

    Args:
        classes: each tree's class (None: the tree has none), in the trees' order; when some tree has one, every
            candidate and greedy step also gets its P95 per class (traces without a class form ``(none)``).

    Returns:
        ``{"p95_before_ms", "candidates": [{kind, operations, change, p95_after_ms, p95_saving_ms, evidence}],
        "greedy": [{step, change, p95_after_ms, p95_saving_ms (cumulative)}]}``, candidates by P95 saving (each
        also with ``established``: False for an assumed parallelisation, which the greedy order leaves out). With
        classes, ``p95_before_by_class_ms`` {class: ms} (largest class first) and, on each candidate and greedy
        step, ``classes`` {class: {``p95_after_ms``, ``p95_saving_ms``}}.
    """
    has_classes = classes is not None and any(k is not None for k in classes)
    # the trees' anchors and names, computed once for every projection
    reuse = _Reuse(classes=classes if has_classes else None)
    start, start_by_class = _p95(trees, base, seed, reuse)
    scored_alone: list[tuple[dict[str, Any], Candidate]] = []
    # the greedy order's first step is the best candidate alone: not projected again
    alone: dict[int, tuple[float, dict[str, float]]] = {}
    for c in candidates(trees, facts, evidence):
        after, after_by_class = alone[id(c)] = _p95(trees, [*base, c.change], seed, reuse)
        row = {
            "kind": c.kind,
            "operations": list(c.change.ops),
            "change": c.change.flag,
            "p95_after_ms": round(after, 3),
            "p95_saving_ms": round(start - after, 3),
            "evidence": c.evidence,
            "established": c.established,
        }
        if has_classes:
            row["classes"] = _class_savings(start_by_class, after_by_class)
        scored_alone.append((row, c))
    scored_alone.sort(key=lambda rc: (-rc[0]["p95_saving_ms"], rc[0]["change"]))
    rows = [r for r, _ in scored_alone]
    # the greedy order takes only fixes the data supports: an assumed parallelisation waits for --independent
    pool = [c for r, c in scored_alone if r["p95_saving_ms"] > 0 and c.established][: GREEDY_STEPS + 1]
    chosen: list[Change] = []
    greedy: list[dict[str, Any]] = []
    current = start
    while pool and len(greedy) < GREEDY_STEPS:
        scored = [
            (alone[id(c)] if not chosen else _p95(trees, [*base, *chosen, c.change], seed, reuse), c) for c in pool
        ]
        (best, best_by_class), pick = min(scored, key=lambda t: t[0][0])
        if best >= current:
            break
        chosen.append(pick.change)
        pool.remove(pick)
        current = best
        step = {"step": len(greedy) + 1, "kind": pick.kind, "change": pick.change.flag,
                "p95_after_ms": round(best, 3), "p95_saving_ms": round(start - best, 3)}  # fmt: skip
        if has_classes:
            step["classes"] = _class_savings(start_by_class, best_by_class)
        greedy.append(step)
    out: dict[str, Any] = {"p95_before_ms": round(start, 3), "candidates": rows, "greedy": greedy}
    if has_classes:
        out["p95_before_by_class_ms"] = start_by_class
    return out
