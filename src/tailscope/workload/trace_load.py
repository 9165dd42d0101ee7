"""Trace → load: the LLM calls of recorded traces as a replayable workload that keeps each trace's call graph.

Each trace becomes one session. Its LLM calls are its top-most ``inference``-layer spans (a model call inside another
model call's span, e.g. the server's own span below the client's, is the same call). Call B depends on call A when A
ended before B started (in the trace) and no other call ran between them (A's end ≤ C's start ≤ … ≤ B's start): its
immediate predecessors (after a fan-out: every branch). B is due ``max(A's replayed end + (B.start − A.end))`` over
them — so sequential steps keep their order and their gaps (tool time, think time), a join waits for every branch,
and calls that overlapped in the trace (a parallel fan-out) are sent concurrently again. Calls that depend on no
earlier call keep their offset from the session's start. Prompt and output lengths come from
``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens`` (also ``llm.token_count.prompt`` / ``completion``),
else the given defaults. Each call's step name is its span's name (the operation name, ``chat plan``), so a replay's
session metrics give the time per step by name (``summary.sessions.by_step``) as an agent profile's do.

Pure: takes spans, returns :class:`~tailscope.workload.spec.RequestSpec`\\ s whose ``after`` holds the dependencies
(the load generator waits for them) and the facts of the conversion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tailscope.records import Span
from tailscope.workload.spec import RequestSpec

_IN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")


@dataclass(frozen=True, slots=True)
class TraceCall:
    """One LLM call of a trace: offsets in ns from the trace's first call, its lengths and what it waits for.

    Attributes:
        deps: indexes (into the session's calls) of the calls that ended before this one started, with the gap in
            ns from each one's end to this call's start.
        tokens_from_trace: True when both lengths came from the span's attributes.
    """

    span_id: str
    name: str
    offset_ns: int
    duration_ns: int
    input_tokens: int
    output_tokens: int
    deps: tuple[tuple[int, int], ...]
    tokens_from_trace: bool


@dataclass(frozen=True, slots=True)
class TraceSession:
    """One trace as a session: where it started (ns since the epoch) and its calls in start order."""

    trace_id: str
    start_ns: int
    calls: tuple[TraceCall, ...]

    @property
    def max_parallel(self) -> int:
        """The most calls in flight at once in the trace (1 = strictly sequential)."""
        events = sorted(
            [(c.offset_ns, 1) for c in self.calls] + [(c.offset_ns + c.duration_ns, -1) for c in self.calls]
        )
        best = cur = 0
        for _, d in events:
            cur += d
            best = max(best, cur)
        return best


def _int_attr(span: Span, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = span.attributes.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 1:
            return int(v)
        if isinstance(v, str) and v.isdigit() and int(v) >= 1:
            return int(v)
    return None


def llm_calls(spans: list[Span]) -> list[Span]:
    """The trace's top-most inference spans, in start order."""
    by_id = {s.span_id: s for s in spans}

    def inside_inference(s: Span) -> bool:
        seen: set[str] = set()
        p = s.parent_id
        while p is not None and p in by_id and p not in seen:
            seen.add(p)
            if by_id[p].layer == "inference":
                return True
            p = by_id[p].parent_id
        return False

    calls = [s for s in spans if s.layer == "inference" and not inside_inference(s)]
    return sorted(calls, key=lambda s: (s.start_ns, s.end_ns, s.span_id))


def trace_session(spans: list[Span], *, input_tokens: int = 512, output_tokens: int = 128) -> TraceSession | None:
    """One trace's LLM calls with their dependencies and gaps, or None when it has no LLM call."""
    calls = llm_calls(spans)
    if not calls:
        return None
    t0 = calls[0].start_ns
    out = []
    for j, c in enumerate(calls):
        before = [i for i in range(j) if calls[i].end_ns <= c.start_ns]
        # immediate predecessors only: a call that another earlier call followed is already waited for through it
        direct = [i for i in before if not any(calls[i].end_ns <= calls[k].start_ns for k in before if k != i)]
        deps = tuple((i, c.start_ns - calls[i].end_ns) for i in direct)
        n_in, n_out = _int_attr(c, _IN_KEYS), _int_attr(c, _OUT_KEYS)
        out.append(
            TraceCall(
                span_id=c.span_id,
                name=c.name,
                offset_ns=c.start_ns - t0,
                duration_ns=max(0, c.end_ns - c.start_ns),
                input_tokens=n_in or input_tokens,
                output_tokens=n_out or output_tokens,
                deps=deps,
                tokens_from_trace=n_in is not None and n_out is not None,
            )
        )
    return TraceSession(trace_id=calls[0].trace_id, start_ns=t0, calls=tuple(out))


def trace_requests(
    sessions: Iterable[TraceSession], *, time_scale: float = 1.0, first_id: int = 0, seed: int = 0
) -> list[RequestSpec]:
    """The sessions as a request stream: each session's calls in start order, its first call at the session's start
    (relative to the earliest session, × ``time_scale``), later calls with ``after`` (their dependencies, gaps
    scaled) or, when they depend on nothing, their own ``at_ns``."""
    listed = sorted(sessions, key=lambda s: (s.start_ns, s.trace_id))
    if not listed:
        return []
    base = listed[0].start_ns
    specs: list[RequestSpec] = []
    next_id = first_id
    for s in listed:
        at0 = round((s.start_ns - base) * time_scale)
        ids = [next_id + k for k in range(len(s.calls))]
        for k, c in enumerate(s.calls):
            after = tuple((ids[i], round(gap * time_scale)) for i, gap in c.deps)
            specs.append(
                RequestSpec(
                    id=ids[k],
                    input_tokens=c.input_tokens,
                    output_tokens=c.output_tokens,
                    at_ns=at0 + round(c.offset_ns * time_scale) if k == 0 or not after else None,
                    request_class="trace",
                    session_id=f"trace-{s.trace_id}",
                    turn=k,
                    seed=seed * 1_000_003 + ids[k],
                    after=after,
                    step=c.name,
                )
            )
        next_id += len(s.calls)
    return specs
