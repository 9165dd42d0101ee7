"""Locate: a bench run's requests joined with a trace set by trace id, each client-seen TTFT and E2E taken apart
(``trace join``). Only reads: the run and the set in the stores given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailscope.api._sources import open_spans
from tailscope.api._support import StorePath, default_store, open_store, public
from tailscope.errors import ConfigError
from tailscope.store.runs import RunStore
from tailscope.store.spans import SpanStore
from tailscope.trace.join import JoinSummary, join_records


@dataclass(frozen=True, slots=True)
class TraceJoin:
    """A bench run's requests joined with a trace set by trace id, each client-seen TTFT and E2E taken apart.

    Attributes:
        run_id, set_name: what was joined.
        summary: the parts per request and their distributions (:class:`~tailscope.trace.join.JoinSummary`).
    """

    run_id: str
    set_name: str
    summary: JoinSummary

    @property
    def joined(self) -> int:
        return self.summary.joined

    @property
    def requests(self) -> int:
        return self.summary.requests

    def to_dict(self) -> dict[str, Any]:
        """The document ``trace join --json`` writes: ``run``, ``set``, ``requests``, ``joined``, ``unjoined``,
        ``ttft_ms``/``e2e_ms`` part distributions, ``explain_*_p99`` and ``per_request`` rows."""
        return {"run": self.run_id, "set": self.set_name, **self.summary.to_dict()}


@public
def join_traces(
    run: str,
    set_name: str,
    *,
    skew_tolerance_ms: float = 1.0,
    store: StorePath | RunStore | None = None,
    trace_store: StorePath | SpanStore | None = None,
) -> TraceJoin:
    """Join the requests of bench run ``run`` (id, prefix, ``latest``) with trace set ``set_name`` by trace id.

    The run must have been made with ``trace_context`` (``bench --trace-context``) and the server must have exported
    its spans into the set (``trace collect``). Each joined request's client-seen TTFT and E2E are split into parts
    that add up to it exactly (docs/metrics.md, "Client and tree"); requests that cannot be joined are counted and
    listed with the reason.

    Args:
        skew_tolerance_ms: how far the server's spans may lie outside the client's send/receive (on the run start's
            Unix time) before clock skew is suspected.
        store: the store holding the run (path or RunStore; default: the command line's).
        trace_store: the store holding the set, when not ``store`` itself.

    Raises:
        NotFoundError: no such run or set. ConfigError: a bad tolerance.
    """
    if not skew_tolerance_ms >= 0:
        raise ConfigError(f"--skew-tolerance-ms must be ≥ 0 (got {skew_tolerance_ms})")
    runs = open_store(store) or default_store()
    stored = runs.get_run(run)
    records = runs.load_records(stored.run.id)
    span_store = SpanStore(runs.db) if trace_store is None else open_spans(trace_store)
    spans = span_store.load_traces(set_name, (r.trace_id for r in records if r.trace_id is not None))
    ctx = (stored.summary or {}).get("trace_context")
    t0_unix = ctx.get("t0_unix_ns") if isinstance(ctx, dict) else None
    summary = join_records(
        records,
        spans,
        t0_unix_ns=int(t0_unix) if isinstance(t0_unix, int | float) else None,
        skew_tolerance_ns=round(skew_tolerance_ms * 1e6),
    )
    return TraceJoin(run_id=stored.run.id, set_name=set_name, summary=summary)
