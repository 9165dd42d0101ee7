"""Session-level metrics: a multi-turn conversation or an agent's call graph (trace → load) judged as a whole.

* **session duration** — from the session's first scheduled request to the end of its last one (the last token, or
  the stream's close when later), over sessions whose every request succeeded;
* **failed sessions** — sessions with at least one failed or incomplete request, or fewer requests than planned
  (a call not sent because one it depends on failed);
* **time per step** — each request of a successful session from its scheduled (due) time to its end: what one step
  of the agent cost, queueing included;
* **steps** — requests per session.

Pure: records in, a JSON-ready dict out (``summary["sessions"]``; docs/metrics.md § Sessions). Warmup requests and
requests outside any session are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tailscope.metrics.percentiles import compute_stats
from tailscope.records import RequestRecord


def session_summary(
    records: Iterable[RequestRecord], planned: Mapping[str, int] | None = None
) -> dict[str, Any] | None:
    """Session metrics of ``records``, or None when no record belongs to a session.

    Args:
        planned: requests planned per session id (a session with fewer records failed); None: not checked.
    """
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session_id is not None and not r.warmup:
            by_session.setdefault(r.session_id, []).append(r)
    if not by_session:
        return None
    durations: list[float] = []
    steps: list[float] = []
    counts: list[float] = []
    failed = 0
    for sid, recs in by_session.items():
        counts.append(len(recs))
        short = planned is not None and len(recs) < planned.get(sid, 0)
        if short or any(not r.ok for r in recs):
            failed += 1
            continue
        ends = [max(e for e in (r.end_ns, r.stream_end_ns) if e is not None) for r in recs if r.end_ns is not None]
        start = min(r.scheduled_ns for r in recs)
        if ends:
            durations.append((max(ends) - start) / 1e6)
        steps.extend((r.end_ns - r.scheduled_ns) / 1e6 for r in recs if r.end_ns is not None)
    if planned is not None:
        missing = [sid for sid in planned if sid not in by_session]
        failed += len(missing)
    total = len(by_session) + (len([s for s in planned if s not in by_session]) if planned is not None else 0)
    return {
        "sessions": total,
        "failed": failed,
        "failed_share": failed / total if total else None,
        "duration_ms": compute_stats(durations).to_dict(),
        "step_ms": compute_stats(steps).to_dict(),
        "steps": compute_stats(counts).to_dict(),
    }
