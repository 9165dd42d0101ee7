"""``bench --profile FILE``: a workload profile, with the options given over it, resolved into a config and stream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from tailscope.errors import ConfigError
from tailscope.runner.base_config import Resolved, base_config, primed, slos_of, token_counter
from tailscope.runner.options import BenchOptions
from tailscope.runner.preflight import LengthBound
from tailscope.runner.progress import Progress
from tailscope.workload.profile import Overrides, Profile, apply_overrides, flag_overrides
from tailscope.workload.spec import RequestSpec

#: options that count as "overrides" of a profile, in the order they are stored with the run
_OVERRIDABLE = (
    "rate", "concurrency", "arrival", "burstiness", "duration", "requests", "warmup", "input_tokens",
    "output_tokens", "model", "url", "seed", "endpoint",
)  # fmt: skip


def overrides_from(opts: BenchOptions) -> Overrides:
    """The profile fields that the given options replace (options > file)."""

    def pick(name: str) -> Any:
        if not opts.given(name):
            return None
        value = getattr(opts, name)
        return str(value) if name in ("input_tokens", "output_tokens") else value

    return flag_overrides(pick, slos=slos_of(opts.slo) if opts.slo else None)


def _load_profile(opts: BenchOptions) -> Profile:
    from tailscope.io.profile import load_profile

    assert opts.profile is not None
    return load_profile(Path(opts.profile))


def resolve_profile(opts: BenchOptions) -> Resolved:
    from tailscope.workload.profile_stream import profile_requests, stage_windows

    base = _load_profile(opts)
    source = str(opts.profile)
    ov = overrides_from(opts)
    p = apply_overrides(base, ov)
    seed = p.seed if p.seed is not None else opts.value("seed")
    arr, stop = p.arrival, p.stop
    if not opts.given("endpoint") and p.endpoint not in ("chat", "completions"):
        raise ConfigError(f"{source}: endpoint {p.endpoint!r}: use chat or completions")
    endpoint = opts.endpoint if opts.given("endpoint") else p.endpoint
    if p.mixed_traffic and (opts.workers is not None or opts.ray is not None):
        raise ConfigError(
            f"{source}: mixed_traffic is sent by the single-process runner only; drop --workers/--ray or "
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
            raise ConfigError(f"{source}: the profile schedules no requests (check stop and arrival)")
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
        specs = primed(specs_iter)
        bound_s = stop.duration_s
    if opts.max_rate is not None and peak is not None and peak > opts.max_rate:
        raise ConfigError(
            f"{source}: the profile's peak rate {peak:g}/s exceeds --max-rate {opts.max_rate:g}; lower the rate "
            "or raise the cap"
        )
    if stop.requests is not None and p.warmup.requests >= stop.requests:
        raise ConfigError(
            f"{source}: warmup.requests {p.warmup.requests} ≥ stop.requests {stop.requests}: no request would be "
            "measured; raise the request count or lower the warmup"
        )
    common = replace(
        opts, url=p.url, model=p.model, endpoint=endpoint, duration=bound_s, seed=seed, slo=(),
        same_prompts=opts.same_prompts or p.same_prompts,
    )  # fmt: skip
    cap = arr.max_concurrency if open_loop else None
    cfg = base_config(common, concurrency=None if open_loop else arr.concurrency, cap=cap)
    settings = {
        **cfg.settings,
        "mode": arr.mode,
        "concurrency": None if open_loop else arr.concurrency,
        **({"max_concurrency": cap} if cap is not None else {}),
        "rate": requested_rate,
        "arrival": arr.process if open_loop else None,
        "burstiness": arr.burstiness if open_loop else None,
        "requests": stop.requests,
        "duration_s": stop.duration_s,
        "warmup": p.warmup.requests,
        "input_tokens": "profile",
        "output_tokens": "profile",
        "slo": [s.key + "=" + f"{s.threshold_ms:g}ms" for s in p.slos],
        "profile": p.name,
        "profile_file": source,
        "overrides": sorted(n for n in _OVERRIDABLE if opts.given(n)) + (["slo"] if opts.slo else []),
        "stages": [_stage_dict(s) for s in arr.stages] if open_loop else [],
        "classes": [c.name for c in p.classes],
        "mixed_traffic": [t.name for t in p.mixed_traffic],
        **(
            {"class_extra_body": {c.name: c.extra_body for c in p.classes if c.extra_body}}
            if any(c.extra_body for c in p.classes)
            else {}
        ),
        **({"class_models": models} if (models := {c.name: c.model for c in p.classes if c.model}) else {}),
        **({"shared_prefix": _prefix_dict(p.shared_prefix)} if p.shared_prefix is not None else {}),
        **({"class_datasets": sets} if (sets := {c.name: c.dataset.ref for c in p.classes if c.dataset}) else {}),
    }
    cfg = replace(
        cfg,
        dispatch=replace(cfg.dispatch, duration_s=stop.duration_s),
        requested_rate=requested_rate,
        slos=p.slos,
        settings=settings,
        profile_name=p.name,
        mixed_traffic=p.mixed_traffic,
        saturation_windows=windows if open_loop else (),
        lengths=tuple(LengthBound(f"{source}: class {c.name}", c.input_tokens, c.output_tokens) for c in p.classes)
        + _agent_bounds(source, p, opts),
        # a class's model rides in its body fields (over the run's model; LoRA adapters are served as models)
        class_extra_body={
            c.name: {**c.extra_body, **({"model": c.model} if c.model else {})}
            for c in p.classes
            if c.extra_body or c.model
        },
    )
    return Resolved(cfg, specs, Progress(total=stop.requests, duration_s=bound_s))


def _agent_bounds(source: str, p: Profile, opts: BenchOptions) -> tuple[LengthBound, ...]:
    """The lengths of every agent step, checked against the served context like a class's; a step's
    ``prompt_template`` text comes on top of its prompt (counted as a dataset's prompts are: ``--tokenizer``, else
    about four characters a token), and the message then names where the template is written (file:line)."""
    from tailscope.workload.agent import step_lengths
    from tailscope.workload.answer_template import parse_template

    steps = [
        (c.name, st)
        for c in p.classes
        if c.agent is not None
        for st in step_lengths(c.agent, input_tokens=c.input_tokens, output_tokens=c.output_tokens)
    ]
    count = token_counter(opts) if any(st.template is not None for _, st in steps) else None
    out: list[LengthBound] = []
    for cls, st in steps:
        label = f"{source}: class {cls} step {st.name}"
        literal = parse_template(st.template).literal_text if st.template is not None else ""
        if count is None or not literal.strip():
            out.append(LengthBound(label, st.input_tokens, st.output_tokens))
            continue
        out.append(
            LengthBound(
                f"{st.where} (class {cls} step {st.name})" if st.where is not None else f"{label} prompt_template",
                st.input_tokens,
                st.output_tokens,
                extra_input_tokens=count(literal),
                extra_what="prompt_template text",
            )
        )
    return tuple(out)


def _prefix_dict(sp: Any) -> dict[str, Any]:
    """The shared prefix as run, and the hit rate it aims at when the profile gave one."""
    out = {"tokens": sp.tokens, "variants": sp.variants, "share": sp.share}
    return {**out, "hit_rate_target": sp.hit_rate} if sp.hit_rate is not None else out


def _stage_dict(s: Any) -> dict[str, Any]:
    if s.kind == "burst":
        return {"burst": s.count, "at_s": s.at_s}
    if s.kind == "ramp":
        return {"ramp_to": s.rate, "ramp_from": s.ramp_from, "duration_s": s.duration_s}
    return {"rate": s.rate, "duration_s": s.duration_s}
