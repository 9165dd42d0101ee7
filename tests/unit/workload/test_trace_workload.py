"""Trace → load (pure): LLM calls, their dependencies and gaps, lengths from gen_ai.usage.*, the request stream; and
the session-level metrics."""

from __future__ import annotations

import random
from dataclasses import replace

from tailscope.metrics.sessions import rebuilt_session_summary, session_summary
from tailscope.records import RequestRecord, Span, Status
from tailscope.trace.demo import demo_trace
from tailscope.workload.trace_load import llm_calls, trace_requests, trace_session

MS = 1_000_000


def _span(sid: str, parent: str | None, name: str, start_ms: int, end_ms: int, layer: str, **attrs: object) -> Span:
    return Span("t" * 32, sid, parent, name, start_ms * MS, end_ms * MS, attributes=dict(attrs), layer=layer)


def fanout_trace() -> list[Span]:
    """plan (0-100) → two parallel calls (150-400, 160-300) → answer (450-700); a server span below the plan call."""
    return [
        _span("a", None, "invoke_agent", 0, 700, "agent"),
        _span("p", "a", "chat plan", 0, 100, "inference", **{"gen_ai.usage.input_tokens": 900}),
        _span("ps", "p", "llm_request", 5, 95, "inference"),
        _span("x", "a", "chat left", 150, 400, "inference"),
        _span("y", "a", "chat right", 160, 300, "inference", **{"gen_ai.usage.output_tokens": 40}),
        _span("t", "a", "execute_tool", 300, 440, "agent"),
        _span("z", "a", "chat answer", 450, 700, "inference",
              **{"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 250}),
    ]  # fmt: skip


def test_calls_dependencies_gaps_and_lengths() -> None:
    assert [s.span_id for s in llm_calls(fanout_trace())] == ["p", "x", "y", "z"]  # the server span is the same call
    s = trace_session(fanout_trace(), input_tokens=100, output_tokens=10)
    assert s is not None
    p, x, y, z = s.calls
    assert (p.input_tokens, p.output_tokens) == (900, 10)
    assert (y.input_tokens, y.output_tokens) == (100, 40)
    assert z.tokens_from_trace
    assert not p.tokens_from_trace
    assert x.deps == ((0, 50 * MS),)
    assert y.deps == ((0, 60 * MS),)  # x and y overlapped: neither waits for the other
    assert z.deps == ((1, 50 * MS), (2, 150 * MS))  # plan is waited for through the fan-out
    assert s.max_parallel == 2


def test_request_stream_keeps_sessions_together_and_scales_gaps() -> None:
    a = trace_session(fanout_trace())
    b_spans = [
        Span("u" * 32, "q", None, "chat", 1000 * MS, 1100 * MS, layer="inference"),
        Span("u" * 32, "r", None, "chat", 1300 * MS, 1400 * MS, layer="inference"),
    ]
    b = trace_session(b_spans)
    assert a is not None
    assert b is not None
    specs = trace_requests([b, a], time_scale=0.5)
    assert [s.session_id for s in specs] == ["trace-" + "t" * 32] * 4 + ["trace-" + "u" * 32] * 2
    assert [s.turn for s in specs] == [0, 1, 2, 3, 0, 1]
    # each call's step is its span's (operation) name, so a replay's time per step is told by name
    assert [s.step for s in specs] == ["chat plan", "chat left", "chat right", "chat answer", "chat", "chat"]
    assert specs[0].at_ns == 0
    assert specs[1].at_ns is None
    assert specs[1].after == ((0, 25 * MS),)
    assert specs[3].after == ((1, 25 * MS), (2, 75 * MS))
    assert specs[4].at_ns == 500 * MS  # the second trace starts 1000 ms after the first, × 0.5
    assert specs[5].after == ((4, 100 * MS),)
    assert len({s.id for s in specs}) == 6


def test_demo_trace_calls_are_sequential_with_tool_gaps() -> None:
    spans = demo_trace(random.Random(3), "d" * 32, 0, sequential_share=1.0, retry_rate=0.0)
    s = trace_session(spans)
    assert s is not None
    assert len(s.calls) == 2
    assert s.calls[0].input_tokens == 900
    assert s.calls[1].output_tokens == 250
    (dep,) = s.calls[1].deps
    assert dep[0] == 0
    assert dep[1] > 100 * MS  # the three tools ran between the two model calls
    assert s.max_parallel == 1


def _rec(i: int, session: str, sched: int, end: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        id=i, scheduled_ns=sched * MS, sent_ns=sched * MS, first_token_ns=sched * MS + MS, end_ns=end * MS,
        status=Status.OK if ok else Status.ERROR, session_id=session, turn=i,
    )  # fmt: skip


def test_session_summary() -> None:
    recs = [_rec(0, "a", 0, 100), _rec(1, "a", 150, 400), _rec(2, "b", 10, 50), _rec(3, "b", 60, 90, ok=False)]
    out = session_summary(recs, {"a": 2, "b": 2, "c": 3})
    assert out is not None
    assert out["sessions"] == 3
    assert out["failed"] == 1  # b had a failed call
    assert out["incomplete"] == 1  # c never ran (the run stopped before it)
    assert out["duration_ms"]["p50"] == 400.0
    assert out["step_ms"]["count"] == 2
    assert session_summary([_rec(0, "a", 0, 1)][:0]) is None


def test_session_summary_cut_sessions_are_incomplete_and_steps_are_named() -> None:
    cut = replace(_rec(4, "d", 0, 10), status=Status.INCOMPLETE)
    recs = [_rec(0, "a", 0, 100), _rec(1, "a", 150, 400), _rec(2, "b", 0, 30), cut]
    out = session_summary(recs, {"a": 2, "b": 3, "d": 1}, {0: "plan", 1: "answer", 2: "plan"})
    assert out is not None
    assert (out["sessions"], out["failed"], out["incomplete"]) == (3, 0, 2)  # b short of its plan, d in flight
    assert out["duration_ms"]["count"] == 1
    assert list(out["by_step"]) == ["plan", "answer"]  # complete sessions only, in the agent's order
    assert out["by_step"]["plan"]["count"] == 1
    assert out["by_step"]["answer"]["p50"] == 250.0


def test_a_killed_agent_runs_cut_session_rebuilt_from_its_records_is_incomplete() -> None:
    """A killed run's stored records: session ``a`` (3 calls drawn) has all of them, session ``b`` (3 drawn) only its
    first two — both successful. Rebuilt, ``b`` is incomplete because its records carry the calls it was drawn with;
    records from before that column (no ``session_calls``) are checked as they are; a replay's own plan wins."""
    recs = [replace(_rec(i, "a", 10 * i, 10 * i + 5), session_calls=3) for i in range(3)]
    recs += [replace(_rec(3 + i, "b", 10 * i, 10 * i + 5), session_calls=3) for i in range(2)]
    out = rebuilt_session_summary(recs, {})
    assert out is not None
    assert (out["sessions"], out["failed"], out["incomplete"], out["duration_ms"]["count"]) == (2, 0, 1, 1)
    old = rebuilt_session_summary([replace(r, session_calls=None) for r in recs], {})
    assert old is not None
    assert (old["incomplete"], old["duration_ms"]["count"]) == (0, 2)
    replay = rebuilt_session_summary(recs, {"trace_load": {"planned": {"a": 4, "b": 2}}})
    assert replay is not None
    assert (replay["incomplete"], replay["duration_ms"]["count"]) == (1, 1)  # a short of the replay's plan
