"""Locate → fix: project changes over a trace set or file (``trace whatif``): every trace re-timed along its tree,
latency before and after, per root operation and class; with ``rank``, candidate fixes from the set's findings ranked
by P95 saving. Only reads: a set in ``store``, or a trace file parsed in memory."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.api._sources import file_traces, is_file, open_spans
from tailscope.api._support import PathLike, StorePath, public
from tailscope.errors import ConfigError, NotFoundError, UnknownOperationError
from tailscope.store.spans import SpanStore
from tailscope.trace.changes import Operations
from tailscope.trace.dependency import Marks, marks_from
from tailscope.trace.tree import TraceTree, build_tree, tree_from_rows


@dataclass(frozen=True, slots=True)
class WhatIfResult:
    """A set's latency before and after projected changes (the document ``trace whatif --json`` writes).

    Attributes:
        before, after: ``{"count", "p50_ms", "p95_ms", "p99_ms", "{stat}_low_ms", "{stat}_high_ms", "mean_ms"}`` of
            the root durations (bootstrap percentile intervals at ``confidence``).
        saving: ``{"p50_ms", "p95_ms", "p99_ms"}``: before − after.
        changes: the changes, each ``{"kind", "operations", "flag"}``.
        traces: traces re-timed.
        root_ops: the same per root operation.
        critical_path: ``{"traces", "changed", "changed_share", "moves": [{"from", "to", "traces", "share"}]}``:
            traces whose dominant critical-path operation changed (another branch became critical).
        candidates, greedy: with ``rank``: candidate fixes projected alone, by P95 saving, and the greedy order;
            when some trace has a class, each also has ``classes`` {class: {``p95_after_ms``, ``p95_saving_ms``}}
            (the document then has ``p95_before_by_class_ms`` {class: ms} too).
        warnings: one line per change or ``--independent`` operation that no span of the set matches (it projects
            no saving, or declares no pair independent; the line names close names), and e.g. a ``--parallel`` over
            calls the data marks as dependent.
        unmatched: the operations of changes and ``--independent`` groups that match no span, each ``{"flag",
            "operation", "close", "group"}`` (``close``: names of the set close to it; ``group``: ``layer 'X'`` or
            ``service 'X'`` when the name is one, ``close`` then listing its operations).
        classes: the same as ``root_ops`` per class (``{class: {"count", "before", "after", "saving"}}``, traces
            without a class as ``(none)``); empty when no trace has one. The document names the attribute read in
            ``class_attribute``.
    """

    before: dict[str, Any]
    after: dict[str, Any]
    saving: dict[str, Any]
    changes: list[dict[str, Any]]
    traces: int
    root_ops: dict[str, Any]
    critical_path: dict[str, Any]
    candidates: list[dict[str, Any]]
    greedy: list[dict[str, Any]]
    warnings: list[str]
    document: dict[str, Any]
    classes: dict[str, Any] = field(default_factory=dict)
    unmatched: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def _trees_and_marks(
    source: PathLike,
    store: StorePath | SpanStore | None,
    root_op: str | None,
    *,
    with_marks: bool = True,
    class_attribute: str | None = None,
    check: Callable[[Operations], None] | None = None,
) -> tuple[Iterator[TraceTree], dict[str, Marks], dict[str, dict[str, str]]]:
    """The trees of a file or set, their dependency marks and, with ``class_attribute``, the values of that attribute
    per trace (span id → value as text). ``check`` sees the source's operations first, before anything else is read
    (it raises to stop)."""
    marks: dict[str, Marks] = {}
    classes: dict[str, dict[str, str]] = {}
    if is_file(source):
        by_trace = file_traces(source)
        if check is not None:
            check(Operations.from_rows({(s.name, s.service, s.layer) for v in by_trace.values() for s in v}))
        trees = []
        for tid, spans in by_trace.items():
            m = marks_from((s.span_id, s.attributes, s.links) for s in spans if s.attributes or s.links)
            if m:
                marks[tid] = m
            if class_attribute:
                found = {s.span_id: _as_text(s.attributes[class_attribute]) for s in spans
                         if s.attributes and s.attributes.get(class_attribute) is not None}  # fmt: skip
                if found:
                    classes[tid] = found
            trees.append(build_tree(spans))
        it: Iterator[TraceTree] = iter(trees)
    else:
        spans_store = open_spans(store)
        if check is not None:
            check(Operations.from_rows(spans_store.operation_rows(str(source))))
        for tid, items in (spans_store.dependency_rows(str(source)) if with_marks else {}).items():
            m = marks_from(items)
            if m:
                marks[tid] = m
        if class_attribute:
            classes = spans_store.attribute_values(str(source), class_attribute)
        it = (tree_from_rows(rows) for rows in spans_store.iter_trace_rows(str(source)))
    if root_op is not None:
        it = _with_root(it, root_op, source)
    return it, marks, classes


def _with_root(trees: Iterator[TraceTree], root_op: str, source: PathLike) -> Iterator[TraceTree]:
    """The trees whose root operation is ``root_op``; when none is, an UnknownOperationError naming the roots the
    set has (``root_op`` is an operation of the set, checked before, but of no trace's root)."""
    roots: set[str] = set()
    kept = 0
    for t in trees:
        name = t.names[t.primary] if t.primary >= 0 else None
        if name == root_op:
            kept += 1
            yield t
        elif name is not None:
            roots.add(name)
    if not kept and roots:
        from tailscope.trace.changes import roots_hint

        raise UnknownOperationError(
            f'--root-op "{root_op}": no trace of {source} has its root span named {root_op!r}; '
            + roots_hint(root_op, roots)
        )


def _as_text(value: Any) -> str:
    """An attribute value as the store's ``json_extract_string`` gives it (a string as is, others as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


#: The root-span attribute that names a trace's class by default (tailscope's client spans set it to the request
#: class of the workload profile).
CLASS_ATTRIBUTE = "tailscope.request.class"


@public
def whatif(
    source: PathLike,
    *,
    set_duration: Sequence[str] = (),
    scale: Sequence[str] = (),
    parallel: Sequence[str] = (),
    parallel_children: Sequence[str] = (),
    cache: Sequence[str] = (),
    remove: Sequence[str] = (),
    cap_retries: Sequence[str] = (),
    timeout: Sequence[str] = (),
    independent: Sequence[str] = (),
    rank: bool = False,
    root_op: str | None = None,
    class_attribute: str | None = CLASS_ATTRIBUTE,
    seed: int = 0,
    resamples: int = 200,
    confidence: float = 0.95,
    store: StorePath | SpanStore | None = None,
) -> WhatIfResult:
    """Project changes over a trace set of ``store`` (by name) or a trace file (by path): every trace re-timed along
    its tree, latency before and after (``docs/trace.md`` states the method).

    Each change argument takes the values of its command-line flag, e.g. ``set_duration=["auth=30ms"]``,
    ``scale=["llm=0.6"]``, ``parallel=["search_a,search_b,search_c"]``, ``cache=["kb=0.4:2ms"]``,
    ``timeout=["kb=3s:200ms"]``, ``cap_retries=["llm=1"]``; all apply together.

    Args:
        independent: groups of operations to treat as independent (``"A,B"``), whatever the data says.
        rank: also generate candidate fixes from the set's findings and rank them by P95 saving (on top of the
            changes given).
        root_op: only traces whose root operation is this.
        class_attribute: the span attribute that names a trace's class (read on the primary root span, else on the
            earliest span carrying it); the result is also broken down by class when some trace has one. None: no
            breakdown.
        seed: seed of the cache draws (a hash of seed, trace and span: the same trace hits the same way).
        resamples: bootstrap resamples for the intervals (0: none).
        confidence: the intervals' confidence.

    Raises:
        ConfigError: a change that does not parse (naming the flag and the form), or no change and no ``rank``.
        UnknownOperationError: no change names an operation (span name or glob) of the set, ``root_op`` names none,
            or no ``independent`` group names two — checked before anything else is read (a change or group of which
            only some operations match gets a warning instead, in ``warnings`` and ``unmatched``); or ``root_op`` is
            an operation of the set but no trace's root (found reading the traces; the message lists the roots).
        NotFoundError: no such set. TraceFormatError: a file without spans.
    """
    from tailscope.trace.changes import (
        Change,
        Unmatched,
        matches_nothing,
        parse_change,
        unmatched,
        unmatched_names,
    )
    from tailscope.trace.dependency import Evidence
    from tailscope.trace.whatif import Plan, Projection, project_trace, trace_class

    changes: list[Change] = []
    given = {"set-duration": set_duration, "scale": scale, "parallel": parallel,
             "parallel-children": parallel_children, "cache": cache, "remove": remove,
             "cap-retries": cap_retries, "timeout": timeout}  # fmt: skip
    try:
        for kind, values in given.items():
            changes.extend(parse_change(kind, v) for v in values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    groups: list[list[str]] = []
    for g in independent:
        ops = [o.strip() for o in g.split(",") if o.strip()]
        if len(ops) < 2:
            raise ConfigError(f'--independent {g!r}: expected "A,B" (two or more operations, comma-separated)')
        groups.append(ops)
    if root_op is not None and not root_op.strip():
        raise ConfigError("--root-op is empty: give a root operation, e.g. 'POST /chat'")
    if not changes and not rank:
        raise ConfigError(
            "give at least one change (--set-duration, --scale, --parallel, --parallel-children, --cache, --remove, "
            "--cap-retries, --timeout) or --rank"
        )
    if not 0 < confidence < 1:
        raise ConfigError(f"--confidence must be within (0, 1) (got {confidence})")
    if resamples < 0:
        raise ConfigError(f"resamples must be ≥ 0 (got {resamples})")
    # the evidence serves --rank and the warnings of --parallel; without them its query and pair counts are skipped
    need_evidence = rank or any(c.kind in ("parallel", "parallel-children") for c in changes)
    missing: list[Unmatched] = []

    def check(ops: Operations) -> None:
        names_them = f"give span names as `tailscope trace analyze --set {source}` lists them"
        missing.extend(unmatched(changes, ops))
        if matches_nothing(changes, missing):
            listed = "; ".join(f"{u.flag}: {u.operation!r} ({u.hint()})" for u in missing)
            raise UnknownOperationError(
                f"no change matches a span of {source}: {listed} — {names_them} (exact, or globs such as 'search*')"
            )
        if root_op is not None:
            bad = unmatched_names(f'--root-op "{root_op}"', [root_op], ops, effect="no trace is left to project")
            if bad:
                raise UnknownOperationError(f"{bad[0].message()} — {names_them} (root operations, exact)")
        # an --independent group with fewer than two operations of the set declares no pair independent
        idle: list[Unmatched] = []
        for g, text in zip(groups, independent, strict=True):
            flag = f'--independent "{text.strip()}"'
            gone = unmatched_names(flag, g, ops, effect="no pair with it is declared independent")
            missing.extend(gone)
            if len(set(g)) - len({u.operation for u in gone}) < 2:
                idle.extend(gone)
        if groups and {u.flag for u in idle} >= {f'--independent "{t.strip()}"' for t in independent}:
            listed = "; ".join(f"{u.flag}: {u.operation!r} ({u.hint()})" for u in idle)
            raise UnknownOperationError(
                f"no --independent group names two operations of {source}: {listed} — {names_them} (exact)"
            )

    trees_it, marks, class_values = _trees_and_marks(
        source, store, root_op, with_marks=need_evidence, class_attribute=class_attribute,
        check=check if changes or groups or root_op is not None else None,
    )  # fmt: skip
    evidence = Evidence(groups)
    plan = Plan(changes, seed=seed)
    proj = Projection()
    kept: list[TraceTree] = []
    kept_classes: list[str | None] = []
    for tree in trees_it:
        if need_evidence:
            evidence.add(tree, marks.get(tree.trace_id))
        klass = trace_class(tree, class_values.get(tree.trace_id))
        outcome = project_trace(tree, plan, klass=klass)
        if outcome is not None:
            proj.outcomes.append(outcome)
        if rank:
            kept.append(tree)
            kept_classes.append(klass)
    if not proj.outcomes:
        raise NotFoundError(f"no traces in {source}" + (f" with root operation {root_op!r}" if root_op else ""))
    doc = proj.summary(resamples=resamples, confidence=confidence, seed=seed)
    warnings = [u.message() for u in missing] + evidence.warnings(changes)
    ranked: dict[str, Any] = {"candidates": [], "greedy": []}
    if rank:
        from tailscope.trace.rank import rank as rank_fixes
        from tailscope.trace.rank import set_facts_with_marks

        facts = set_facts_with_marks(kept, marks)
        ranked = rank_fixes(kept, facts, evidence, base=changes, seed=seed, classes=kept_classes)
    doc.update(
        {"set": str(source), "changes": [c.to_dict() for c in changes], "traces": len(proj.outcomes),
         "seed": seed, "confidence": confidence, "warnings": warnings, "unmatched": [u.to_dict() for u in missing],
         "class_attribute": class_attribute, **ranked}
    )  # fmt: skip
    return WhatIfResult(
        before=doc["before"], after=doc["after"], saving=doc["saving"], changes=doc["changes"], traces=doc["traces"],
        root_ops=doc["root_ops"], critical_path=doc["critical_path"], candidates=doc["candidates"],
        greedy=doc["greedy"], warnings=warnings, document=doc, classes=doc.get("classes", {}),
        unmatched=doc["unmatched"],
    )  # fmt: skip
