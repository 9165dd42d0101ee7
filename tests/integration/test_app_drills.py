"""The reference app's other drill faults, end to end over loopback: ``llm-slow``, ``retrieval-down`` and ``db-slow``
(issue 25; ``tests/integration/test_drill.py`` covers ``llm-down``).

Three short drills (4 req/s for 6 s, the fault from 2 s to 4 s) run at the same time, each against its own app
(``time_scale=0.1``, ``--fix all``) whose spans the real OTLP receiver collects. Always checked: the fault window in
the drill's timeline, the verdicts and exit codes (``error_rate_max`` must hold for all three; ``fallback_min: 1``
must fail for ``llm-slow``, which slows the model but never makes the app fall back), and the fault's mark in the
spans (``retrieval-down``: failed ``retrieve`` spans without searches). The latency effects (the during-window's
p95 up for ``llm-slow``, database queries 10 × slower for ``db-slow``, only while the fault is on) are judged with
the ``judgement`` fixture.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
from contextlib import ExitStack
from typing import Any

import pytest
from test_drill import app_in_thread  # the app (--fix all at SCALE) in a thread of its own

import tailscope
from tailscope.api.drill import DrillResult
from tailscope.records import Span
from tailscope.report.drill import drill_text
from tailscope.trace.receiver import OtlpReceiver

pytestmark = pytest.mark.integration

SCALE = 0.1
AT_S, FOR_S, DURATION_S, RATE = 2.0, 2.0, 6.0, 4.0
#: kind → the expectations: error_rate_max holds for every fault; fallback_min fails for llm-slow (no fallback)
EXPECT: dict[str, dict[str, Any]] = {
    "llm-slow": {"error_rate_max": 0.01, "fallback_min": 1},
    "retrieval-down": {"error_rate_max": 0.01},
    "db-slow": {"error_rate_max": 0.01},
}


def drill_doc(kind: str, url: str) -> dict[str, Any]:
    return {
        "name": kind,
        "target": {"url": url},
        "load": {"rate": RATE, "duration_s": DURATION_S, "output_tokens": 16},
        "fault": {"at_s": AT_S, "for_s": FOR_S, "kind": kind},
        "expect": EXPECT[kind],
    }


async def _drills() -> dict[str, tuple[DrillResult, list[Span]]]:
    spans: dict[str, list[Span]] = {kind: [] for kind in EXPECT}
    receivers = {kind: OtlpReceiver(spans[kind].extend, port=0, flush_interval_s=0.2) for kind in EXPECT}
    for r in receivers.values():
        await r.start()
    stack = ExitStack()
    try:
        urls = {
            k: stack.enter_context(app_in_thread(otlp_endpoint=f"http://127.0.0.1:{r.port}"))
            for k, r in receivers.items()
        }
        # the verdicts do not depend on the machine: the latency checks are left to the judgement fixture
        results = await asyncio.gather(
            *(tailscope.drill_async(drill_doc(k, u), seed=5, timing=False) for k, u in urls.items())
        )
    finally:
        await asyncio.to_thread(stack.close)  # the apps export their last spans to the receivers on this loop
        await asyncio.sleep(0.4)
        for r in receivers.values():
            await r.stop()
    return {k: (res, spans[k]) for k, res in zip(EXPECT, results, strict=True)}


@pytest.fixture(scope="module")
def drills() -> dict[str, tuple[DrillResult, list[Span]]]:
    return asyncio.run(_drills())


def _window_s(result: DrillResult) -> tuple[float, float]:
    events = {e.event: e.t_s for e in result.timeline}
    return events["fault-start"], events["fault-end"]


@pytest.mark.parametrize("kind", list(EXPECT))
def test_drill_records_the_fault_window_and_judges_its_expectations(
    kind: str, drills: dict[str, tuple[DrillResult, list[Span]]]
) -> None:
    result, spans = drills[kind]
    doc = result.to_dict()
    print(drill_text(doc))
    assert result.problems == (), doc["problems"]
    start, end = _window_s(result)
    assert start == pytest.approx(AT_S, abs=0.5), doc["timeline"]
    assert end - start == pytest.approx(FOR_S, abs=0.5), doc["timeline"]
    assert "fallback-engaged" not in {e.event for e in result.timeline}  # none of these faults fails the model
    assert result.fallbacks == 0
    # requests in every window (4 req/s: ≈ 8 before, 8 during, 8 after), none failed: the app degrades, not errs
    assert min(result.before.requests, result.during.requests, result.after.requests) >= 3, doc["windows"]
    assert result.whole.failed == 0, doc["windows"]
    checks = {c.name: c.passed for c in result.checks}
    assert checks["error_rate_max"] is True
    assert not result.timing_judged
    if kind == "llm-slow":
        assert checks == {"error_rate_max": True, "fallback_min": False}
        assert (result.passed, result.exit_code) == (False, 1)
    else:
        assert checks == {"error_rate_max": True}
        assert (result.passed, result.exit_code) == (True, 0)
    roots = [s for s in spans if s.name == "POST /v1/chat/completions"]
    assert len(roots) >= result.whole.requests  # every request traced (plus the drill's health probes, if any)


def _slow_cluster(times_ns: list[int]) -> float:
    """Seconds from the first to the last of ``times_ns`` (0 when fewer than two)."""
    return (max(times_ns) - min(times_ns)) / 1e9 if len(times_ns) > 1 else 0.0


def _most_within(times_ns: list[int], span_s: float) -> int:
    """The most of ``times_ns`` that fall within one interval ``span_s`` long."""
    ts = sorted(times_ns)
    return max((sum(1 for u in ts[i:] if u - t <= span_s * 1e9) for i, t in enumerate(ts)), default=0)


def test_llm_slow_slows_the_fault_window(drills: dict[str, tuple[DrillResult, list[Span]]], judgement: Any) -> None:
    result, spans = drills["llm-slow"]
    before, during, after = result.before.e2e_p95_ms, result.during.e2e_p95_ms, result.after.e2e_p95_ms
    assert before is not None
    assert during is not None
    assert after is not None
    # + 4 × the model API's uncached TTFT (1.1 s median at full scale): ≈ + 440 ms at 0.1, over a p95 of ≈ 150 ms;
    # outside the fault, the quieter of the two windows (the first requests also pay the three apps' start)
    judgement.holds(
        during > 2 * min(before, after),
        f"llm-slow: E2E p95 {before:.0f} ms before, {during:.0f} ms during, {after:.0f} ms after",
    )
    chats = [s.duration_ns / 1e6 for s in spans if s.layer == "inference" and s.name.startswith("chat ")]
    assert chats, {s.name for s in spans}
    slow = [s.start_ns for s in spans if s.name.startswith("chat ") and s.duration_ns / 1e6 > 300]
    inside = _most_within(slow, FOR_S + 1.0)
    judgement.holds(
        inside >= 2 and inside >= 0.8 * len(slow),
        f"llm-slow: {len(slow)} model calls over 300 ms, {inside} of them within {FOR_S + 1.0} s (fault {FOR_S} s); "
        f"median call {statistics.median(chats):.0f} ms",
    )


def test_retrieval_down_answers_without_passages(drills: dict[str, tuple[DrillResult, list[Span]]]) -> None:
    result, spans = drills["retrieval-down"]
    by_trace: dict[str, list[Span]] = collections.defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    failed = [s for s in spans if s.name == "retrieve" and s.status == "ERROR"]
    ok = [s for s in spans if s.name == "retrieve" and s.status != "ERROR"]
    # during the fault the retrieval fails after the query embedding: no search, no rerank; the answer goes on
    assert failed, {(s.name, s.status) for s in spans if s.name == "retrieve"}
    assert ok  # and before and after it, the searches run
    for s in failed:
        names = {t.name for t in by_trace[s.trace_id]}
        assert "embed query" in names
        assert not any(n.startswith("search ") or n == "rerank" for n in names), names
        assert any(n.startswith("chat ") for n in names), names  # the model still answers, without passages
    # the failures fall inside the fault's window (plus a request's time in flight): a 2 s fault, one cluster
    spread = _slow_cluster([s.start_ns for s in failed])
    assert spread <= FOR_S + 1.0, spread
    # ≈ 8 requests in the window, a third answered by the semantic cache before retrieval
    assert len(failed) <= result.during.requests + 2


def test_db_slow_slows_the_queries_while_on(drills: dict[str, tuple[DrillResult, list[Span]]], judgement: Any) -> None:
    result, spans = drills["db-slow"]
    queries = [s for s in spans if s.layer == "business" and s.name in {"SELECT users", "INSERT history"}]
    assert len(queries) >= result.whole.requests  # a profile read per request (+ a history write when answered)
    ms = sorted(s.duration_ns / 1e6 for s in queries)
    median = statistics.median(ms)
    # 10 × slower queries (median 1.5 ms at 0.1 → 15 ms) for a third of the drill. A fixed "5 × the median" line
    # counted only 3–4 of them here (the measured median, 5–6 ms, carries the app's own overhead) and failed a
    # clean-clone run; instead, the slowest queries (as many as the fault window had requests) are the fault's:
    # ≥ 80 % of them start within one fault-long interval, and they are ≥ 5 ms slower than the median (the fault
    # adds 13.5 ms; the app's overhead is added to both, so a ratio to the median is not steady: median 13.2 ms once).
    k = max(3, result.during.requests)
    slowest = sorted(queries, key=lambda s: s.duration_ns)[-k:]
    inside = _most_within([s.start_ns for s in slowest], FOR_S + 1.0)
    floor = slowest[0].duration_ns / 1e6
    figures = (
        f"db-slow: the {k} slowest of {len(queries)} queries ({floor:.1f} ms and up, median {median:.1f} ms), "
        f"{inside} of them within {FOR_S + 1.0} s (fault {FOR_S} s, {result.during.requests} requests in it)"
    )
    print(figures)
    judgement.holds(inside >= 0.8 * k and floor > median + 5.0, figures)
