"""The pure part of a drill: windows by send time, recovery as the first step back within the before-window's
bounds, and the judgement of the expectations."""

from __future__ import annotations

from tailscope.records import ErrorClass, RequestRecord, Status
from tailscope.verify.drill import DrillExpect, judge, phases, recovery_s, window

MS = 1_000_000


def rec(i: int, sent_s: float, e2e_ms: float, ok: bool = True) -> RequestRecord:
    sent = int(sent_s * 1e9)
    return RequestRecord(
        id=i,
        scheduled_ns=sent,
        sent_ns=sent,
        first_token_ns=sent + int(e2e_ms * MS / 2) if ok else None,
        end_ns=sent + int(e2e_ms * MS),
        status=Status.OK if ok else Status.ERROR,
        error=None if ok else ErrorClass.HTTP_5XX,
    )


def drill_records() -> list[RequestRecord]:
    """10 s at 4/s: fault 3–5 s fails everything, 5–6 s slow (the tail of the recovery), then normal."""
    out = []
    for i in range(40):
        t = i * 0.25
        if 3 <= t < 5:
            out.append(rec(i, t, 5, ok=False))
        elif 5 <= t < 6:
            out.append(rec(i, t, 400))
        else:
            out.append(rec(i, t, 100))
    return out


def test_phases_cut_by_send_time() -> None:
    before, during, after = phases(drill_records(), 3.0, 5.0, 10.0)
    assert (before.requests, during.requests, after.requests) == (12, 8, 20)
    assert before.error_rate == 0
    assert during.error_rate == 1.0
    assert during.errors == {"http_5xx": 8}
    assert during.e2e_p95_ms is None
    assert before.e2e_p95_ms is not None
    assert abs(before.e2e_p95_ms - 100) < 1e-6


def test_recovery_is_the_first_step_back_within_bounds() -> None:
    records = drill_records()
    before = window(records, "before", 0, 3)
    rec_s, steps = recovery_s(records, before, 5.0, 10.0, step_s=1.0, p95_tolerance=0.5, error_tolerance=0.01)
    assert rec_s == 1.0  # 5–6 s is slow (400 ms > 150 ms), 6–7 s is back
    assert len(steps) == 5
    never, _ = recovery_s(records, before, 5.0, 6.0, step_s=1.0, p95_tolerance=0.5, error_tolerance=0.01)
    assert never is None


def test_judge_scopes_and_timing() -> None:
    records = drill_records()
    whole = window(records, "all", 0, 10.1)
    _, during, _ = phases(records, 3.0, 5.0, 10.0)
    expect = DrillExpect(error_rate_max=0.01, e2e_p95_max_ms=1000, recovered_within_s=0.5, fallback_min=1)
    checks = {c.name: c for c in judge(expect, whole=whole, during=during, recovered_s=1.0, fallbacks=0)}
    assert not checks["error_rate_max"].passed
    assert checks["error_rate_max"].observed == 0.2
    assert checks["e2e_p95_max_ms"].passed
    assert not checks["recovered_within_s"].passed
    assert not checks["fallback_min"].passed
    untimed = judge(expect, whole=whole, during=during, recovered_s=None, fallbacks=3, timing=False)
    assert [c.name for c in untimed] == ["error_rate_max", "fallback_min"]
    during_scope = judge(
        DrillExpect(e2e_p95_max_ms=1000, scope="during"), whole=whole, during=during, recovered_s=None, fallbacks=None
    )
    assert not during_scope[0].passed
    assert during_scope[0].observed is None
