"""``bench --from-traces SET``: an ingested trace set's LLM calls replayed as sessions that keep each trace's call
graph (order, parallel fan-outs, gaps; :mod:`tailscope.workload.trace_load`).

Reads the set from the store (``traces_db``; default the command line's store): the first ``--requests`` traces with
at least one LLM call (default 100), their calls in start order with ``gen_ai.usage.*`` token counts (else
``--input-tokens``/``--output-tokens`` when fixed, else 512/128). Sessions start at their traces' start offsets ×
``--time-scale``; ``--duration`` stops scheduling new sessions.
"""

from __future__ import annotations

from tailscope.errors import ConfigError, NotFoundError
from tailscope.runner.base_config import Resolved, at_own_times, last_send_s
from tailscope.runner.options import BenchOptions
from tailscope.workload.trace_load import TraceSession, trace_requests, trace_session

DEFAULT_SESSIONS = 100


def _fixed(spec: str | int | None, default: int) -> int:
    if spec is None:
        return default
    if isinstance(spec, int):
        return spec
    if spec.strip().isdigit():
        return int(spec)
    raise ConfigError(
        f"--input-tokens/--output-tokens {spec!r}: with --from-traces give one number (the length of a "
        "call whose span has no gen_ai.usage.* tokens)"
    )


def load_sessions(opts: BenchOptions) -> list[TraceSession]:
    """The set's first traces that have LLM calls, as sessions.

    Raises:
        NotFoundError: no such trace set. ConfigError: the set has no LLM (inference-layer) call.
    """
    from tailscope.store.spans import SpanStore

    assert opts.from_traces is not None
    store = SpanStore(opts.traces_db)
    # NotFoundError naming the set and what exists
    ids = store.inference_trace_ids(opts.from_traces, opts.requests or DEFAULT_SESSIONS)
    d_in = _fixed(opts.input_tokens, 512)
    d_out = _fixed(opts.output_tokens, 128)
    if not ids:
        raise ConfigError(
            f"--from-traces {opts.from_traces}: no LLM call in the set (spans of the inference layer: gen_ai.* "
            "chat/completion spans, OpenInference LLM spans); see `tailscope trace layers`"
        )
    loaded = store.load_traces(opts.from_traces, ids)
    sessions = [s for tid in ids if (s := trace_session(loaded.get(tid, []), input_tokens=d_in, output_tokens=d_out))]
    if not sessions:
        raise NotFoundError(f"--from-traces {opts.from_traces}: the traces could not be read back")
    return sessions


def resolve_trace_load(opts: BenchOptions) -> Resolved:
    """The bench of a trace set: its sessions, config and progress."""
    for flag, name in (
        ("--rate", "rate"),
        ("--concurrency", "concurrency"),
        ("--profile", "profile"),
        ("--replay", "replay"),
        ("--dataset", "dataset"),
    ):
        if opts.given(name):
            raise ConfigError(
                f"{flag} does not apply to --from-traces: the traces fix when each session starts and "
                "how its calls follow each other; use --time-scale and --requests (sessions)"
            )
    sessions = load_sessions(opts)
    specs = trace_requests(sessions, time_scale=opts.time_scale, seed=opts.value("seed"))
    if opts.duration is not None:
        cut = {s.session_id for s in specs if s.turn == 0 and (s.at_ns or 0) >= opts.duration * 1e9}
        specs = [s for s in specs if s.session_id not in cut]
    if not specs:
        raise ConfigError(f"--from-traces {opts.from_traces}: no session starts inside --duration")
    last_send_s(
        specs,
        spans=f"--from-traces {opts.from_traces}: the sessions span",
        fix="speed up with --time-scale or cut with --requests/--duration",
    )
    planned: dict[str, int] = {}
    for s in specs:
        planned[s.session_id or ""] = planned.get(s.session_id or "", 0) + 1
    return at_own_times(
        opts,
        specs,
        mode="trace_load",
        name=f"traces:{opts.from_traces}",
        label=f"--from-traces {opts.from_traces}",
        requests=len(specs),
        duration_s=opts.duration,
        input_tokens="trace",
        output_tokens="trace",
        time_scale=opts.time_scale,
        trace_load={
            "set": opts.from_traces,
            "sessions": len(sessions),
            "calls": len(specs),
            "tokens_from_trace": sum(c.tokens_from_trace for s in sessions for c in s.calls),
            "max_parallel": max(s.max_parallel for s in sessions),
            "planned": planned,
        },
    )
