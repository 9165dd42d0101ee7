"""Session-level metrics: a multi-turn conversation or an agent's call graph (trace → load, agent profiles) judged as
a whole.

* **session duration** — from the session's first scheduled request to the end of its last one (the last token, or
  the stream's close when later), over complete sessions (every planned request sent and succeeded);
* **failed sessions** — sessions with at least one failed request (a call whose dependency failed is not sent, so
  the session has fewer requests than planned too);
* **incomplete sessions** — sessions the run's stop cut without a failure: a request still in flight when the run
  stopped, or fewer requests than planned (later steps not sent, or the session never started);
* **time per step** — each request of a complete session from its scheduled (due) time to its end: what one step of
  the agent cost, queueing and the tool gap's lateness included (the tool gap itself is before the due time);
* **steps** — requests per session; **by step** — time per step for each agent step name (``plan``,
  ``research/search``), when the step names are known, in the order the agent first runs them.

Pure: records in, a JSON-ready dict out (``summary["sessions"]``; docs/metrics.md § Sessions). Warmup requests and
requests outside any session are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tailscope.metrics.percentiles import compute_stats
from tailscope.records import RequestRecord, Status


def session_summary(
    records: Iterable[RequestRecord],
    planned: Mapping[str, int] | None = None,
    steps: Mapping[int, str] | None = None,
) -> dict[str, Any] | None:
    """Session metrics of ``records``, or None when no record belongs to a session.

    Args:
        planned: requests planned per session id (a session with fewer records is failed or incomplete; a planned
            session with none is incomplete); None: not checked.
        steps: agent step name per request id; None: each record's own ``step`` (stored with it). ``by_step``
            holds each step name's time per step.
    """
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session_id is not None and not r.warmup:
            by_session.setdefault(r.session_id, []).append(r)
    if not by_session:
        return None
    durations: list[float] = []
    step_times: list[float] = []
    named: dict[str, list[float]] = {}
    first: dict[str, int] = {}  # steps in the order the agent runs them: by the first request of each name
    counts: list[float] = []
    failed = incomplete = 0
    for sid, recs in by_session.items():
        counts.append(len(recs))
        for r in recs:
            if (name := steps.get(r.id) if steps is not None else r.step) is not None:
                first[name] = min(r.id, first.get(name, r.id))
        if any(r.status == Status.ERROR for r in recs):
            failed += 1
            continue
        short = planned is not None and len(recs) < planned.get(sid, 0)
        if short or any(not r.ok for r in recs):
            incomplete += 1
            continue
        ends = [max(e for e in (r.end_ns, r.stream_end_ns) if e is not None) for r in recs if r.end_ns is not None]
        start = min(r.scheduled_ns for r in recs)
        if ends:
            durations.append((max(ends) - start) / 1e6)
        for r in recs:
            if r.end_ns is None:
                continue
            ms = (r.end_ns - r.scheduled_ns) / 1e6
            step_times.append(ms)
            name = steps.get(r.id) if steps is not None else r.step
            if name is not None:
                named.setdefault(name, []).append(ms)
    missing = [sid for sid in planned if sid not in by_session] if planned is not None else []
    incomplete += len(missing)
    total = len(by_session) + len(missing)
    out: dict[str, Any] = {
        "sessions": total,
        "failed": failed,
        "failed_share": failed / total if total else None,
        "incomplete": incomplete,
        "duration_ms": compute_stats(durations).to_dict(),
        "step_ms": compute_stats(step_times).to_dict(),
        "steps": compute_stats(counts).to_dict(),
    }
    if named:
        out["by_step"] = {n: compute_stats(named[n]).to_dict() for n in sorted(named, key=lambda n: (first[n], n))}
    return out


def rebuilt_session_summary(records: Iterable[RequestRecord], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The session metrics of a stored run that has no summary (killed, or still going), from its records' own
    ``session_id``/``step``, against the calls planned per session: trace → load's plan
    (``settings["trace_load"]["planned"]``) when the run was a replay, else each agent session's drawn calls as its
    records carry them (``session_calls``), so a session the stop cut before its later calls were sent is
    incomplete. Records stored before that column (schema < 7) carry none: their sessions are checked as they are."""
    records = list(records)
    planned = (settings.get("trace_load") or {}).get("planned")
    if not isinstance(planned, Mapping):
        drawn: dict[str, int] = {}
        for r in records:
            if r.session_id is not None and r.session_calls is not None and not r.warmup:
                drawn[r.session_id] = max(r.session_calls, drawn.get(r.session_id, 0))
        planned = drawn or None
    return session_summary(records, planned)
