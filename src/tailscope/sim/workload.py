"""The request stream a ``tailscope sim`` run simulates: from ``--profile`` (flags typed on the command line
override it), from the flags alone, or from an ingested trace set (``--from-traces``), with the settings the run
records about it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailscope.errors import ConfigError
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.sim.run import SimArgs

__all__ = ["Workload", "resolve_specs"]


@dataclass(frozen=True, slots=True)
class Workload:
    """A resolved request stream, how it is driven (closed-loop clients, a stop) and what the run records of it."""

    specs: Iterator[RequestSpec]
    concurrency: int | None
    duration_s: float | None
    slos: tuple[Slo, ...]
    profile: str | None
    settings: dict[str, Any]
    warnings: tuple[str, ...] = ()


def resolve_specs(a: SimArgs) -> Workload:
    """The request stream from ``--profile`` (flags typed on the command line override it) or from the flags."""
    from tailscope.workload.lengths import parse_length_spec

    slos = tuple(parse_slo(s) for s in a.slo)
    if a.stagger is not None and not 0 <= a.stagger < float("inf"):
        raise ConfigError(
            f"--stagger {a.stagger:g}: give the seconds over which a closed loop's clients start, ≥ 0 (0: all at "
            "once, as bench starts them)"
        )
    open_loop = "--from-traces" if a.from_traces is not None else "--rate" if a.rate is not None else None
    if a.stagger is not None and open_loop is not None and a.profile is None:
        raise ConfigError(
            f"--stagger: only a closed loop (--concurrency) has clients to stagger; drop it with {open_loop}"
        )
    if a.from_traces is not None:
        return _trace_workload(a, a.from_traces, slos)
    if a.profile is not None:
        from tailscope.io.profile import load_profile
        from tailscope.workload.profile import apply_overrides, flag_overrides
        from tailscope.workload.profile_stream import profile_requests

        def pick(name: str) -> Any:
            # sim has no --model/--url load flags of a profile's kind: those never override the profile here
            return getattr(a, name) if name in a.explicit and name not in ("model", "url") else None

        ov = flag_overrides(pick, slos=slos or None)
        base = load_profile(a.profile)
        p = apply_overrides(base, ov)
        seed = p.seed if p.seed is not None else a.seed
        specs = profile_requests(base, seed=seed, overrides=ov)
        closed = p.arrival.mode == "closed"
        stages = p.arrival.stages
        steady = not closed and len(stages) == 1 and stages[0].kind == "rate"
        if p.arrival.max_concurrency is not None:
            raise ConfigError(
                f"{a.profile}: arrival.max_concurrency (an open loop capped in flight) is not simulated; drop it "
                "(or --concurrency) to simulate the uncapped open loop"
            )
        settings: dict[str, Any] = {
            "profile": p.name,
            "profile_file": str(a.profile),
            "mode": p.arrival.mode,
            "seed": seed,
            "rate": stages[0].rate if steady else None,  # one constant rate: the saturation check applies
        }
        if closed:
            settings["stagger_s"] = a.stagger  # None: one request's lifetime (the simulator's figures say how long)
        elif a.stagger is not None:
            raise ConfigError(f"--stagger: {a.profile} is an open loop (arrival.mode {p.arrival.mode}): no clients")
        warnings: tuple[str, ...] = ()
        if p.mixed_traffic:
            names = [t.name for t in p.mixed_traffic]
            settings["mixed_traffic_not_simulated"] = names
            warnings = (
                f"{a.profile}: mixed_traffic ({', '.join(names)}) is not simulated: it is plain HTTP to other "
                "services, and the simulator models the LLM engine only. The engine's figures are for the LLM "
                "traffic alone; measure the rest with `tailscope bench --profile` against the real services.",
            )
        return Workload(
            specs=specs,
            concurrency=p.arrival.concurrency if closed else None,
            duration_s=p.stop.duration_s,
            slos=p.slos,
            profile=p.name,
            settings=settings,
            warnings=warnings,
        )
    from tailscope.workload.simple import LoadShape, simple_requests

    concurrency = a.concurrency
    if concurrency is None and a.rate is None:
        concurrency = 16  # the same default shape as a quick bench
    shape = LoadShape(
        concurrency=concurrency,
        rate=a.rate,
        arrival=a.arrival,
        burstiness=a.burstiness,
        requests=a.requests,
        duration_s=a.duration,
        warmup=a.warmup,
    )
    shape.validate()
    specs = simple_requests(
        shape,
        parse_length_spec(a.input_tokens, what="--input-tokens"),
        parse_length_spec(a.output_tokens, what="--output-tokens"),
        seed=a.seed,
    )
    return Workload(
        specs=specs,
        concurrency=concurrency if a.rate is None else None,
        duration_s=a.duration,
        slos=slos,
        profile=None,
        settings={
            "mode": "open" if a.rate is not None else "closed",
            "concurrency": concurrency if a.rate is None else None,
            "rate": a.rate,
            "arrival": a.arrival if a.rate is not None else None,
            "requests": a.requests,
            "duration_s": a.duration,
            "input_tokens": a.input_tokens,
            "output_tokens": a.output_tokens,
            "warmup": a.warmup,
            **({"stagger_s": a.stagger} if a.rate is None else {}),
        },
    )


def _trace_workload(a: SimArgs, set_name: str, slos: tuple[Slo, ...]) -> Workload:
    """``--from-traces SET``: the set's first ``--requests`` traces with LLM calls (default 100) as call-graph
    sessions, as ``bench --from-traces`` replays them (:mod:`tailscope.workload.trace_load`)."""
    from tailscope.errors import NotFoundError
    from tailscope.store.spans import SpanStore
    from tailscope.workload.trace_load import trace_requests, trace_session

    for name, flag in (("profile", "--profile"), ("rate", "--rate"), ("concurrency", "--concurrency")):
        if getattr(a, name) is not None:
            raise ConfigError(
                f"{flag} does not apply to --from-traces: the traces fix when each session starts and how its "
                "calls follow each other; use --time-scale and --requests (sessions)"
            )
    if a.time_scale <= 0:
        raise ConfigError(f"--time-scale {a.time_scale:g}: give a factor > 0 (0.5 = twice as fast)")
    lengths = []
    for value, flag, default in ((a.input_tokens, "--input-tokens", 512), (a.output_tokens, "--output-tokens", 128)):
        if flag.lstrip("-").replace("-", "_") not in a.explicit:
            lengths.append(default)
        elif value.strip().isdigit():
            lengths.append(int(value))
        else:
            raise ConfigError(f"{flag} {value!r}: with --from-traces give one number (a call without token counts)")
    store = SpanStore(a.traces_db if a.traces_db is not None else a.db)
    ids = store.inference_trace_ids(set_name, a.requests or 100)  # NotFoundError naming the set and what exists
    if not ids:
        raise ConfigError(
            f"--from-traces {set_name}: no LLM call in the set (spans of the inference layer); see "
            "`tailscope trace layers`"
        )
    loaded = store.load_traces(set_name, ids)
    sessions = [
        ses
        for tid in ids
        if (ses := trace_session(loaded.get(tid, []), input_tokens=lengths[0], output_tokens=lengths[1]))
    ]
    if not sessions:
        raise NotFoundError(f"--from-traces {set_name}: the traces could not be read back")
    specs = trace_requests(sessions, time_scale=a.time_scale, seed=a.seed)
    if a.duration is not None:
        cut = {sp.session_id for sp in specs if sp.turn == 0 and (sp.at_ns or 0) >= a.duration * 1e9}
        specs = [sp for sp in specs if sp.session_id not in cut]
        if not specs:
            raise ConfigError(f"--from-traces {set_name}: no session starts inside --duration {a.duration:g}")
    planned: dict[str, int] = {}
    for sp in specs:
        planned[sp.session_id or ""] = planned.get(sp.session_id or "", 0) + 1
    settings = {
        "mode": "trace_load",
        "time_scale": a.time_scale,
        "trace_load": {"set": set_name, "sessions": len(planned), "calls": len(specs), "planned": planned},
    }
    return Workload(
        specs=iter(specs), concurrency=None, duration_s=a.duration, slos=slos, profile=None, settings=settings
    )
