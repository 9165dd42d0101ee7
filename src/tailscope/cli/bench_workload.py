"""``bench --profile FILE`` and ``bench --replay FILE``: request streams from files, resolved at the CLI edge.

Resolution is CLI > file > defaults, field by field: only the flags the user actually typed override the profile
(``BenchArgs.explicit``). The common parts of the config (target, timeouts, store, workers …) come from the flag
resolver itself, called with the profile's values, so both paths build the same :class:`BenchConfig`; this module
then puts in the profile's request stream, rate curve, SLOs, mixed traffic and the steady stages that the
over-saturation check tests. Imported lazily (it pulls in pydantic and YAML).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailscope.errors import ConfigError
from tailscope.metrics.slo import parse_slo
from tailscope.runner.progress import Progress
from tailscope.workload.model import Overrides, Profile, apply_overrides, flag_overrides
from tailscope.workload.plan import profile_requests, stage_windows
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.cli.bench_run import BenchArgs
    from tailscope.runner.bench import BenchConfig

Resolved = tuple["BenchConfig", Iterator[RequestSpec], Progress]
FlagResolver = Callable[["BenchArgs"], Resolved]

#: flags whose typed value overrides a profile field even when it equals the flag's default.
_DEFAULTED = ("arrival", "burstiness", "warmup", "input_tokens", "output_tokens", "seed", "endpoint")


def given(args: BenchArgs, name: str) -> bool:
    """Whether flag ``name`` (the parameter name) was given on the command line.

    ``args.explicit`` is filled by the CLI; when it is None (args built in code) a value counts as given when it is
    set, and flags that always have a value (``arrival``, ``warmup``, lengths, ``seed``, ``endpoint``) never do.
    """
    if args.explicit is not None:
        return name in args.explicit
    if name in _DEFAULTED:
        return False
    value = getattr(args, name)
    return value is not None and value != () and value is not False


def resolve_workload(args: BenchArgs, resolve_flags: FlagResolver) -> Resolved:
    """Config, request stream and progress counters for ``--profile`` or ``--replay``.

    Args:
        args: the bench flags (``profile`` or ``replay`` set).
        resolve_flags: the flag-only resolver (:func:`tailscope.cli.bench_run.resolve`), used for the common config.

    Raises:
        ConfigError / ProfileError: naming the file, line and field, or the conflicting flags.
    """
    if args.profile is not None and args.replay is not None:
        raise ConfigError("--profile and --replay exclude each other: a trace already fixes times and lengths")
    if given(args, "rate") and given(args, "concurrency"):
        raise ConfigError("--concurrency (closed loop) and --rate (open loop) exclude each other; give one")
    if args.replay is not None:
        return _replay(args, resolve_flags)
    assert args.profile is not None
    return _profile(args, resolve_flags)


def overrides_from(args: BenchArgs) -> Overrides:
    """The profile fields the typed flags replace (CLI > file)."""

    def pick(name: str) -> Any:
        return getattr(args, name) if given(args, name) else None

    return flag_overrides(pick, slos=tuple(parse_slo(s) for s in args.slo) if args.slo else None)


def _primed(specs: Iterator[RequestSpec]) -> Iterator[RequestSpec]:
    """Pull the first spec now, so a bad profile fails before the target is contacted (the plan is lazy)."""
    first = next(specs, None)
    return iter(()) if first is None else itertools.chain([first], specs)


def _profile(args: BenchArgs, resolve_flags: FlagResolver) -> Resolved:
    from tailscope.workload.profile import load_profile

    assert args.profile is not None
    base = load_profile(args.profile)
    ov = overrides_from(args)
    p: Profile = apply_overrides(base, ov)
    seed = p.seed if p.seed is not None else args.seed
    arr, stop = p.arrival, p.stop
    if not given(args, "endpoint") and p.endpoint not in ("chat", "completions"):
        raise ConfigError(f"{args.profile}: endpoint {p.endpoint!r}: use chat or completions")
    endpoint = args.endpoint if given(args, "endpoint") else p.endpoint
    if p.mixed_traffic and (args.workers is not None or args.ray is not None):
        raise ConfigError(
            f"{args.profile}: mixed_traffic is sent by the single-process runner only; drop --workers/--ray or "
            "remove mixed_traffic from the profile"
        )
    specs_iter = profile_requests(base, seed=seed, overrides=ov)
    open_loop = arr.mode == "open"
    windows: tuple[tuple[float, float], ...] = ()
    requested_rate: float | None = None
    peak: float | None = None
    specs: Iterator[RequestSpec]
    bound_s: float | None
    if open_loop:
        # open-loop schedules are bounded by construction; materialize to know the stage ends and fail early
        spec_list = list(specs_iter)
        if not spec_list:
            raise ConfigError(f"{args.profile}: the profile schedules no requests (check stop and arrival)")
        last_s = max((s.at_ns or 0) for s in spec_list) / 1e9
        timed = stage_windows(arr, duration_s=stop.duration_s)
        windows = tuple((w.start_s, w.end_s if w.end_s is not None else last_s + 1e-6) for w in timed if w.steady)
        bursts = [s for s in arr.stages if s.kind == "burst"]
        if len(timed) == 1 and timed[0].steady and not bursts:
            requested_rate = timed[0].rate_start
        peak = max([max(w.rate_start, w.rate_end) for w in timed] or [1.0])
        specs = iter(spec_list)
        bound_s = stop.duration_s if stop.duration_s is not None else last_s + 1e-3
    else:
        specs = _primed(specs_iter)
        bound_s = stop.duration_s
    flags = replace(
        args,
        profile=None,
        url=p.url,
        model=p.model,
        endpoint=endpoint,
        rate=peak if open_loop else None,
        concurrency=None if open_loop else arr.concurrency,
        arrival=arr.process,
        burstiness=arr.burstiness,
        requests=stop.requests,
        duration=bound_s,
        warmup=p.warmup.requests,
        seed=seed,
        slo=(),
    )
    cfg, _unused, _progress = resolve_flags(flags)
    settings = dict(cfg.settings)
    settings.update(
        {
            "mode": arr.mode,
            "rate": requested_rate,
            "arrival": arr.process if open_loop else None,
            "duration_s": stop.duration_s,
            "input_tokens": "profile",
            "output_tokens": "profile",
            "slo": [s.key + "=" + f"{s.threshold_ms:g}ms" for s in p.slos],
            "profile": p.name,
            "profile_file": str(args.profile),
            "overrides": sorted(_given_names(args)),
            "stages": [_stage_dict(s) for s in arr.stages] if open_loop else [],
            "classes": [c.name for c in p.classes],
            "mixed_traffic": [t.name for t in p.mixed_traffic],
        }
    )
    cfg = replace(
        cfg,
        dispatch=replace(cfg.dispatch, concurrency=None if open_loop else arr.concurrency, duration_s=stop.duration_s),
        requested_rate=requested_rate,
        seed=seed,
        slos=p.slos,
        settings=settings,
        profile_name=p.name,
        mixed_traffic=p.mixed_traffic,
        saturation_windows=windows if open_loop else (),
    )
    return cfg, specs, Progress(total=stop.requests, duration_s=bound_s)


def _stage_dict(s: Any) -> dict[str, Any]:
    if s.kind == "burst":
        return {"burst": s.count, "at_s": s.at_s}
    if s.kind == "ramp":
        return {"ramp_to": s.rate, "ramp_from": s.ramp_from, "duration_s": s.duration_s}
    return {"rate": s.rate, "duration_s": s.duration_s}


def _given_names(args: BenchArgs) -> set[str]:
    names = (
        "rate", "concurrency", "arrival", "burstiness", "duration", "requests", "warmup", "input_tokens",
        "output_tokens", "model", "url", "seed", "endpoint",
    )  # fmt: skip
    out = {n for n in names if given(args, n)}
    if args.slo:
        out.add("slo")
    return out


def sessions_follow_turn0(specs: Iterable[RequestSpec]) -> list[RequestSpec]:
    """Reorder a stream so every session's later turns follow its turn 0 directly (what the load generator reads).

    Trace rows are sorted by time, so the turns of concurrent sessions interleave; the runner sends a later turn
    after the previous response anyway (think time), so only the stream order changes, never a send time.
    """
    groups: list[list[RequestSpec]] = []
    open_sessions: dict[str, list[RequestSpec]] = {}
    for s in specs:
        if s.session_id is not None and (s.turn or 0) > 0 and s.session_id in open_sessions:
            open_sessions[s.session_id].append(s)
            continue
        group = [s]
        groups.append(group)
        if s.session_id is not None:
            open_sessions[s.session_id] = group
    return [s for g in groups for s in g]


def _replay(args: BenchArgs, resolve_flags: FlagResolver) -> Resolved:
    from tailscope.workload.replay import read_replay, replay_requests

    assert args.replay is not None
    for flag, name in (("--rate", "rate"), ("--concurrency", "concurrency")):
        if given(args, name):
            raise ConfigError(
                f"{flag} does not apply to --replay: the trace fixes the send times; use --time-scale to speed up "
                "(0.5 = twice as fast) or slow down"
            )
    rows = read_replay(args.replay, fmt=args.replay_format)
    specs = sessions_follow_turn0(
        replay_requests(
            rows,
            seed=args.seed,
            time_scale=args.time_scale,
            warmup=args.warmup,
            max_requests=args.requests,
            duration_s=args.duration,
        )
    )
    if not specs:
        raise ConfigError(f"--replay {args.replay}: no request falls inside --duration/--requests")
    last_s = max((s.at_ns or 0) for s in specs) / 1e9
    firsts = [s for s in specs if s.at_ns is not None]
    mean_rate = (len(firsts) - 1) / last_s if last_s > 0 and len(firsts) > 1 else 1.0
    flags = replace(
        args,
        replay=None,
        rate=mean_rate,
        concurrency=None,
        arrival="constant",
        duration=args.duration if args.duration is not None else last_s + 1e-3,
    )
    cfg, _unused, _progress = resolve_flags(flags)
    settings = dict(cfg.settings)
    settings.update(
        {
            "mode": "replay",
            "rate": None,
            "arrival": None,
            "input_tokens": "replay",
            "output_tokens": "replay",
            "replay": str(args.replay),
            "replay_format": args.replay_format,
            "time_scale": args.time_scale,
        }
    )
    cfg = replace(
        cfg,
        dispatch=replace(cfg.dispatch, concurrency=None, duration_s=args.duration),
        requested_rate=None,
        settings=settings,
        profile_name=f"replay:{Path(args.replay).name}",
        saturation_windows=(),
    )
    return cfg, iter(specs), Progress(total=len(specs), duration_s=args.duration)
