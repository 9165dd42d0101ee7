"""Dependency evidence: which sibling calls are independent (could run together), decided from the data.

Per trace, :func:`marks_from` reads what the data says outright: a span *consumes* another's output when it links to
it (span links) or when one of its attribute values carries the other's tool call id (``gen_ai.tool.call.id`` and
the like); a span marked with a parallel-tool-calls attribute (``gen_ai.request.parallel_tool_calls`` …) runs its
children's tool calls in parallel, and a marked model call the tool calls that follow it under the same parent (those
it issued, up to the next model call).

Across a set, :class:`Evidence` counts for every pair of sibling operations under the same parent operation how often
each ran first, how often they overlapped, and the marks. Its verdict, in this order:

1. the user said the pair is independent (``--independent "A,B"``) → **independent**;
2. they overlapped in some trace → **independent** (they already ran together);
3. their order varies across traces → **independent** (neither waits for the other);
4. a parallel-tool-calls attribute marks their parent, or the model call before them that issued both (or both
   calls themselves) → **independent**;
5. a later sibling consumes both (the inputs of one join, e.g. the searches a rerank links to) and neither is marked as
   consuming the other → **independent**;
6. one always starts after the other ended, and the data marks it as consuming the other's output → **dependent**;
7. otherwise (always the same order, nothing marks a dependency) → **assumed** independent: the projection holds
   only if nothing unrecorded (a value passed in the program) links them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.trace.tree import TraceTree

#: Attributes that carry a tool call's id.
CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool.call.id", "tool_call_id", "gen_ai.tool_call.id", "llm.tool_call.id")
#: Attributes that mark a model call (or agent step) as issuing its tool calls in parallel.
PARALLEL_KEYS = ("gen_ai.request.parallel_tool_calls", "llm.parallel_tool_calls", "parallel_tool_calls")
_MIN_ID = 6  # shorter ids are not searched for inside longer strings (too many accidental matches)
_MAX_PAIRS_CHILDREN = 64  # siblings compared pairwise per parent (wider fan-outs: the first ones)


@dataclass(frozen=True, slots=True)
class Marks:
    """What one trace's data says about dependencies.

    Attributes:
        consumes: span id → ids of spans whose output it consumes.
        parallel: ids of spans whose children the data marks as parallel tool calls.
    """

    consumes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    parallel: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.consumes or self.parallel)

    def by_index(self, tree: TraceTree) -> dict[int, set[int]]:
        """``consumes`` as span indices of ``tree`` (spans not in it dropped)."""
        index = {sid: k for k, sid in enumerate(tree.span_ids)}
        out: dict[int, set[int]] = {}
        for sid, used in self.consumes.items():
            i = index.get(sid)
            if i is None:
                continue
            got = {index[u] for u in used if u in index and u != sid}
            if got:
                out[i] = got
        return out


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, str):
                yield v


def marks_from(spans: Iterable[tuple[str, Mapping[str, Any] | None, Sequence[tuple[str, str]] | None]]) -> Marks:
    """The marks of one trace from ``(span id, attributes, links)`` of its spans (spans without attributes or links
    may be left out)."""
    items = list(spans)
    ids: dict[str, str] = {}  # tool call id → span id
    parallel: set[str] = set()
    for sid, attrs, _ in items:
        if not attrs:
            continue
        for key in CALL_ID_KEYS:
            v = attrs.get(key)
            if isinstance(v, str) and v:
                ids[v] = sid
        for key in PARALLEL_KEYS:
            if attrs.get(key) in (True, "true", "True", 1):
                parallel.add(sid)
    consumes: dict[str, set[str]] = {}
    for sid, attrs, links in items:
        used: set[str] = set()
        for link in links or ():
            if len(link) > 1 and link[1] and link[1] != sid:
                used.add(str(link[1]))
        if ids and attrs:
            for key, value in attrs.items():
                if key in CALL_ID_KEYS:
                    continue
                for text in _strings(value):
                    if text in ids:
                        used.add(ids[text])
                    elif len(text) > _MIN_ID:
                        used.update(span for cid, span in ids.items() if len(cid) >= _MIN_ID and cid in text)
        used.discard(sid)
        if used:
            consumes[sid] = used
    return Marks({k: frozenset(v) for k, v in consumes.items()}, frozenset(parallel))


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether two sibling operations are independent: ``independent``, ``dependent`` or ``assumed``, and why."""

    kind: str
    reason: str

    @property
    def parallelisable(self) -> bool:
        return self.kind != "dependent"


@dataclass(slots=True)
class _Pair:
    first: int = 0  # a (the smaller name) ended before b started
    second: int = 0  # b ended before a started
    overlap: int = 0
    a_uses_b: int = 0
    b_uses_a: int = 0
    parallel: int = 0
    co_inputs: int = 0  # both consumed by the same later sibling (a fan-in)


def _issuers(kids: Sequence[int], sids: Sequence[str], layers: Sequence[str], par: frozenset[str]) -> dict[int, int]:
    """Sibling → the sibling that issued it as a parallel tool call: the nearest earlier sibling marked with parallel
    tool calls (a model call asking for them: its tool calls run after it, beside it under the same parent), until
    the next model call. The marked call itself is issued by none (its tool calls wait for it)."""
    out: dict[int, int] = {}
    current = -1
    for c in kids:
        if sids[c] in par:
            current = c
        elif layers[c] == "inference":
            current = -1
        elif current >= 0:
            out[c] = current
    return out


class Evidence:
    """Dependency evidence over a set (see the module docstring).

    Args:
        independent: groups of operations the user declares independent (``--independent "A,B"``).
    """

    def __init__(self, independent: Iterable[Sequence[str]] = ()) -> None:
        self.user = [frozenset(g) for g in independent]
        self.pairs: dict[tuple[str, str, str], _Pair] = {}

    def add(self, tree: TraceTree, marks: Marks | None = None) -> None:
        """Count one trace's sibling pairs."""
        names, starts, ends, sids, layers = tree.names, tree.starts, tree.ends, tree.span_ids, tree.layers
        uses = marks.by_index(tree) if marks else {}
        par = marks.parallel if marks else frozenset()
        pairs = self.pairs
        for p, kids in enumerate(tree.children):
            if len(kids) < 2:
                continue
            pname = names[p]
            parallel = sids[p] in par
            kk = kids[:_MAX_PAIRS_CHILDREN]
            issuer = _issuers(kk, sids, layers, par) if par else {}
            seen: dict[str, int] = {}
            for c in kk:
                seen[names[c]] = seen.get(names[c], 0) + 1
            for x in range(len(kk)):
                for y in range(x + 1, len(kk)):
                    i, j = kk[x], kk[y]
                    a, b = names[i], names[j]
                    if a == b or seen[a] > 1 or seen[b] > 1:
                        continue  # a repeated call runs both before and after the other: its order tells nothing
                    if a > b:
                        i, j, a, b = j, i, b, a
                    key = (pname, a, b)
                    st = pairs.get(key)
                    if st is None:
                        st = pairs[key] = _Pair()
                    if ends[i] <= starts[j]:
                        st.first += 1
                    elif ends[j] <= starts[i]:
                        st.second += 1
                    else:
                        st.overlap += 1
                    if j in uses.get(i, ()):
                        st.a_uses_b += 1
                    if i in uses.get(j, ()):
                        st.b_uses_a += 1
                    if (
                        parallel
                        or issuer.get(i, -1) == issuer.get(j, -2)
                        or (sids[i] in par and sids[j] in par and "inference" not in (layers[i], layers[j]))
                    ):
                        st.parallel += 1
            if uses:
                self._fan_in(tree, p, kids, uses)

    def _fan_in(self, tree: TraceTree, p: int, kids: Sequence[int], uses: Mapping[int, set[int]]) -> None:
        """Count the sibling pairs that one later sibling consumes together (the inputs of one join)."""
        names = tree.names
        siblings = set(kids)
        for c in kids:
            used = uses.get(c)
            if not used:
                continue
            inputs = sorted(u for u in used if u in siblings)
            for x in range(len(inputs)):
                for y in range(x + 1, len(inputs)):
                    a, b = names[inputs[x]], names[inputs[y]]
                    if a == b:
                        continue
                    lo, hi = (a, b) if a < b else (b, a)
                    st = self.pairs.get((names[p], lo, hi))
                    if st is not None:
                        st.co_inputs += 1

    def verdict(self, parent: str, a: str, b: str) -> Verdict:
        """Whether sibling operations ``a`` and ``b`` under ``parent`` are independent, and why."""
        if a == b:
            return Verdict("assumed", f"repeated {a}: order cannot be told apart")
        for g in self.user:
            if a in g and b in g:
                return Verdict("independent", f"declared independent (--independent {','.join(sorted(g))})")
        x, y = (a, b) if a < b else (b, a)
        st = self.pairs.get((parent, x, y))
        if st is None:
            return Verdict("assumed", f"{a} and {b} never seen together under {parent}")
        if st.overlap:
            return Verdict("independent", f"{x} and {y} overlapped in {st.overlap} trace(s)")
        if st.first and st.second:
            return Verdict("independent", f"order varies: {x} first in {st.first}, {y} first in {st.second} trace(s)")
        if st.parallel:
            return Verdict("independent", f"parallel tool calls marked in {st.parallel} trace(s)")
        if st.co_inputs and not (st.a_uses_b or st.b_uses_a):
            return Verdict(
                "independent",
                f"{x} and {y} are consumed together by a later call in {st.co_inputs} trace(s) and neither consumes "
                "the other",
            )
        if st.first and st.b_uses_a:
            return Verdict("dependent", f"{y} always starts after {x} ends and consumes its output (links/call ids)")
        if st.second and st.a_uses_b:
            return Verdict("dependent", f"{x} always starts after {y} ends and consumes its output (links/call ids)")
        first, then = (x, y) if st.first else (y, x)
        return Verdict("assumed", f"{then} always after {first}, nothing marks a dependency")

    def split(self, parent: str, ops: Sequence[str]) -> tuple[list[str], list[tuple[str, Verdict]]]:
        """A sequential group's operations (in the order they ran) split into those that can run together (each
        independent of every earlier one kept) and the dependent ones with the verdict that keeps them apart."""
        kept: list[str] = []
        dropped: list[tuple[str, Verdict]] = []
        for op in ops:
            if op in kept:
                continue
            blocker = next((v for v in (self.verdict(parent, k, op) for k in kept) if not v.parallelisable), None)
            if blocker is None:
                kept.append(op)
            else:
                dropped.append((op, blocker))
        return kept, dropped

    def warnings(self, changes: Iterable[Any]) -> list[str]:
        """One line per ``parallel`` change over operations the data marks as dependent (the projection would
        assume what cannot happen)."""
        out: list[str] = []
        for c in changes:
            if getattr(c, "kind", "") != "parallel":
                continue
            ops = set(c.ops)
            for parent, a, b in self.pairs:
                if a in ops and b in ops:
                    v = self.verdict(parent, a, b)
                    if v.kind == "dependent":
                        out.append(f"{c.flag}: under {parent}, {v.reason}; the projection assumes it need not wait")
        return out
