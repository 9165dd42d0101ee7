"""Locate → fix: score each operation of a trace set or file for caching (``trace cacheability``) and project the
``--cache`` what-if of each candidate. Only reads: a set in ``store``, or a trace file parsed in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailscope.api._sources import file_traces, is_file, open_spans
from tailscope.api._support import PathLike, StorePath, public
from tailscope.errors import ConfigError, UnknownOperationError
from tailscope.store.spans import SpanStore
from tailscope.trace.tree import build_tree

if TYPE_CHECKING:
    from tailscope.trace.changes import Operations


@dataclass(frozen=True, slots=True)
class CacheabilityResult:
    """Each operation's cacheability score (the document ``trace cacheability --json`` writes).

    Attributes:
        operations: one row per operation, best score first: ``operation``, ``calls``, ``mean_ms``, ``compared``,
            ``reuse_share``, ``reuse``, ``cost``, ``immutability``, ``score``, ``ttl_s``, ``candidate``, ``note``;
            a candidate also has ``whatif`` {``change``, ``p95_before_ms``, ``p95_after_ms``, ``p95_saving_ms``}.
        candidates: the operations scoring ≥ 60.
    """

    operations: list[dict[str, Any]]
    candidates: list[str]
    document: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def _per_op_seconds(values: Sequence[str], flag: str, *, rate: bool, named: dict[str, str]) -> dict[str, float]:
    """Each value's operation and seconds; ``named`` gets each operation's flag as typed (for the name check)."""
    from tailscope.trace.cacheability import YEAR_S
    from tailscope.trace.changes import parse_duration_ns

    per = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
    out: dict[str, float] = {}
    for text in values:
        op, sep, rhs = text.rpartition("=")
        want = '"OP=4/d" (changes per s, m, h or d)' if rate else '"OP=30d" (how long an answer stays valid)'
        if not sep or not op.strip():
            raise ConfigError(f"{flag} {text!r}: expected {want}")
        try:
            if rate:
                n, _, unit = rhs.strip().partition("/")
                changes = float(n)
                if unit.strip() not in per or changes < 0:
                    raise ValueError
                out[op.strip()] = per[unit.strip()] / changes if changes > 0 else YEAR_S * 100
            else:
                out[op.strip()] = parse_duration_ns(rhs) / 1e9
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"{flag} {text!r}: expected {want}") from None
        named.setdefault(op.strip(), f'{flag} "{text.strip()}"')
    return out


def _check_names(named: dict[str, str], source: PathLike, ops: Operations) -> None:
    """An UnknownOperationError for the first ``--ttl``/``--change-rate`` operation that names no span of the set
    (exactly: the score looks TTLs up by operation), with its close names."""
    from tailscope.trace.changes import unmatched_names

    for op, flag in named.items():
        bad = unmatched_names(flag, [op], ops, effect="its TTL would score nothing")
        if bad:
            raise UnknownOperationError(
                f"{bad[0].message()} — give operations as `tailscope trace analyze --set {source}` lists them (exact)"
            )


@public
def cacheability(
    source: PathLike,
    *,
    ttl: Sequence[str] = (),
    change_rate: Sequence[str] = (),
    window: str = "1h",
    hit_duration: str = "1ms",
    seed: int = 0,
    store: StorePath | SpanStore | None = None,
) -> CacheabilityResult:
    """Score each operation of a trace set (or file) for caching: reuse (40), compute cost (30), immutability (30);
    ≥ 60 marks a candidate, whose ``--cache`` what-if is projected (``docs/trace.md``, "Cacheability").

    Args:
        ttl: per operation, how long an answer stays valid (``"kb search=30d"``).
        change_rate: per operation, how often its data changes (``"user profile=4/d"``; the TTL is its inverse).
        window: calls repeating an earlier call's arguments within this long count as reuse.
        hit_duration: the duration of a cache hit in the what-if.

    Raises:
        ConfigError: a flag that does not parse. UnknownOperationError: a ``ttl``/``change_rate`` operation that is no
            span's name (exact; the message names the flag and the close names) — for a stored set, found before any
            span is read. NotFoundError: no such set. TraceFormatError: a file without spans.
    """
    import json

    import numpy as np

    from tailscope.trace.cacheability import call_key, score_calls
    from tailscope.trace.changes import Operations, parse_change, parse_duration_ns
    from tailscope.trace.tree import tree_from_rows
    from tailscope.trace.whatif import project

    named: dict[str, str] = {}
    ttl_s = _per_op_seconds(change_rate, "--change-rate", rate=True, named=named)
    ttl_s.update(_per_op_seconds(ttl, "--ttl", rate=False, named=named))
    try:
        window_ns = parse_duration_ns(window)
        hit_ns = parse_duration_ns(hit_duration)
    except ValueError as exc:
        raise ConfigError(f"--window/--hit-duration: {exc}") from None
    if is_file(source):
        by_trace = file_traces(source)
        if named:
            _check_names(
                named, source, Operations.from_rows((s.name, s.service, None) for t in by_trace.values() for s in t)
            )
        calls = [
            (s.name, s.start_ns, s.end_ns - s.start_ns, call_key(s.attributes)) for t in by_trace.values() for s in t
        ]
        trees = [build_tree(spans) for spans in by_trace.values()]
    else:
        spans_store = open_spans(store)
        if named:  # before any call is read
            _check_names(named, source, Operations.from_rows(spans_store.operation_rows(str(source))))
        calls = [
            (name, start, dur, call_key(json.loads(attrs)) if attrs else None)
            for name, start, dur, attrs in spans_store.iter_call_rows(str(source))
        ]
        trees = []
    rows = score_calls(calls, window_ns=window_ns, ttl_s=ttl_s)
    picked = [r for r in rows if r["candidate"]]
    if picked:
        if not trees:
            trees = [tree_from_rows(r) for r in open_spans(store).iter_trace_rows(str(source))]
        base = project(trees, [], paths=False).arrays()[0]
        p95_before = float(np.quantile(base, 0.95)) / 1e6 if base.size else 0.0
        for r in picked:
            change = parse_change("cache", f"{r['operation']}={r['reuse_share']:.4f}:{hit_ns / 1e6:g}ms")
            after = project(trees, [change], seed=seed, paths=False).arrays()[1]
            p95 = float(np.quantile(after, 0.95)) / 1e6 if after.size else 0.0
            r["whatif"] = {"change": change.flag, "p95_before_ms": round(p95_before, 3), "p95_after_ms": round(p95, 3),
                           "p95_saving_ms": round(p95_before - p95, 3)}  # fmt: skip
    doc: dict[str, Any] = {"set": str(source), "window_s": window_ns / 1e9, "operations": rows,
           "candidates": [r["operation"] for r in picked]}  # fmt: skip
    return CacheabilityResult(rows, doc["candidates"], doc)
