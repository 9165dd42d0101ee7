"""Waterfalls: sibling calls that ran one after another although they plausibly do not depend on each other.

A *waterfall group* is a maximal run of ≥ 2 siblings, in start order, such that

* each member is a candidate: a tool, retrieval, HTTP or database call (layer agent, retrieval, network or
  business) whose subtree contains no model call (no ``inference`` span);
* each member starts at or after the end of every earlier member, and overlaps no other sibling (a member of a
  concurrent batch ends the run);
* no other sibling starts between them (a model call or any other work between two tool calls ends the run);
* a member is not a retry of the previous one (same name after an error);
* a member does not consume an earlier member's output (a span link to it, or its tool call id in an attribute:
  :mod:`tailscope.trace.dependency`): such a call starts a new run, so its wait is never counted as saving.

If the group ran concurrently it would take as long as its longest member, so the local saving is
``S = (last end − first start) − max(member duration)``. The trace only gets faster where the group is on the
critical path: with ``C`` the path time inside the group's window owned by the parent or the members' subtrees, the
projected trace duration is ``duration − min(S, C)``. This is a first-order projection: it assumes no other branch
becomes critical once the group shrinks, so it is an upper bound on the saving.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tailscope.trace.tree import TraceTree

CANDIDATE_LAYERS = frozenset({"agent", "retrieval", "network", "business"})
_PATTERNS: dict[tuple[str, tuple[str, ...]], str] = {}  # interned pattern strings (many traces share one)


@dataclass(frozen=True, slots=True)
class WaterfallGroup:
    """One sequential group in one trace.

    Attributes:
        pattern: ``"parent → a, b, c"`` (member names in the order they ran).
        parent_id: the parent span.
        member_ids: the members, in start order.
        window_ns: last end − first start.
        local_saving_ns: window − longest member.
        saving_ns: projected reduction of the trace duration (``min(local saving, path time in the window)``).
    """

    pattern: str
    parent_id: str
    member_ids: tuple[str, ...]
    window_ns: int
    local_saving_ns: int
    saving_ns: int


def pattern_of(parent: str, members: tuple[str, ...]) -> str:
    """``"parent → a, b, c"``, interned (many traces share one pattern)."""
    pattern = _PATTERNS.get((parent, members))
    if pattern is None:
        if len(_PATTERNS) > 10_000:
            _PATTERNS.clear()
        pattern = _PATTERNS[(parent, members)] = f"{parent} → {', '.join(members)}"
    return pattern


def find_waterfalls(
    tree: TraceTree,
    layers: Sequence[str],
    has_model: Sequence[bool],
    incl: Sequence[int],
    own_segments: Mapping[int, Sequence[tuple[int, int]]],
    *,
    async_blocking: bool = False,
    consumes: Mapping[int, set[int]] | None = None,
) -> list[WaterfallGroup]:
    """All waterfall groups of one trace.

    Args:
        tree: the trace.
        layers: layer of each span (by index).
        has_model: whether each span's subtree contains an inference span.
        incl: each span's inclusive critical-path time (its subtree's path segments), ns.
        own_segments: for spans with children, their own critical-path segments ``(start, end)``.
        async_blocking: treat async children as blocking.
        consumes: span index → indices of the spans whose output it consumes (:meth:`Marks.by_index
            <tailscope.trace.dependency.Marks.by_index>`).
    """
    groups: list[WaterfallGroup] = []
    blocks = tree.blocking
    for p, kids in enumerate(tree.children):
        if len(kids) < 2:
            continue
        candidate = {c for c in kids if layers[c] in CANDIDATE_LAYERS and not has_model[c]}
        if len(candidate) < 2:
            continue
        siblings = list(kids) if async_blocking else [c for c in kids if blocks[c]]
        for members in _runs(tree, siblings, candidate, consumes or {}):
            groups.append(_group(tree, p, members, incl, own_segments.get(p, ())))
    return groups


def _runs(
    tree: TraceTree, siblings: list[int], candidate: set[int], consumes: Mapping[int, set[int]]
) -> list[list[int]]:
    """Maximal runs of ≥ 2 candidate siblings (in start order) that ran alone, one after another, not retrying,
    none consuming an earlier member's output."""
    starts, ends, names, statuses = tree.starts, tree.ends, tree.names, tree.statuses
    # A member must have run alone: it overlaps no other sibling (a concurrent batch is not a waterfall).
    # Siblings are sorted by start, so only the running max end before k and the next start matter.
    n = len(siblings)
    alone = [True] * n
    max_end = -(2**63)
    for k, c in enumerate(siblings):
        if starts[c] < max_end or (k + 1 < n and starts[siblings[k + 1]] < ends[c]):
            alone[k] = False
        if ends[c] > max_end:
            max_end = ends[c]
    run: list[int] = []
    runs: list[list[int]] = []
    run_end = 0
    prev_name = ""
    prev_error = False
    for k, c in enumerate(siblings):
        if c not in candidate or not alone[k]:
            if len(run) > 1:
                runs.append(run)
            run = []
            continue
        name = names[c]
        retry = prev_error and prev_name == name
        prev_name, prev_error = name, statuses[c] == "ERROR"
        uses = consumes.get(c)
        if run and starts[c] >= run_end and not retry and not (uses and not uses.isdisjoint(run)):
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
    return runs


def _group(
    tree: TraceTree,
    p: int,
    members: list[int],
    incl: Sequence[int],
    parent_segments: Sequence[tuple[int, int]],
) -> WaterfallGroup:
    starts, ends, names, sids = tree.starts, tree.ends, tree.names, tree.span_ids
    w0 = starts[members[0]]
    w1 = longest = 0
    on_path = 0  # path time in the window owned by the members' subtrees (they lie inside it) or the parent itself
    for m in members:
        if ends[m] > w1:
            w1 = ends[m]
        if ends[m] - starts[m] > longest:
            longest = ends[m] - starts[m]
        on_path += incl[m]
    local = max(0, (w1 - w0) - longest)
    for s, e in parent_segments:
        if e > w0 and s < w1:
            on_path += min(e, w1) - max(s, w0)
    return WaterfallGroup(
        pattern=pattern_of(names[p], tuple(names[m] for m in members)),
        parent_id=sids[p],
        member_ids=tuple(sids[m] for m in members),
        window_ns=w1 - w0,
        local_saving_ns=local,
        saving_ns=min(local, on_path),
    )
