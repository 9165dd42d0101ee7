"""Resolve :class:`BenchOptions` into a validated :class:`BenchConfig`, a request stream and progress counters.

Three sources of requests: the options alone (one class, one arrival process), a workload profile (``profile``)
or a replayed trace (``replay``). Resolution is options > file > defaults, field by field: only options that were
given (not None) override the profile. Every error — a bad flag, a bad profile line, conflicting options — is raised
here, before the target is contacted.
"""

from __future__ import annotations

import itertools
import json
import random
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailscope.client.openai import Timeouts
from tailscope.errors import ConfigError
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.options import BenchOptions
from tailscope.runner.preflight import LengthBound

if TYPE_CHECKING:
    from tailscope.io.datasets import DatasetRow
    from tailscope.workload.datasets import Conversation
from tailscope.runner.progress import Progress
from tailscope.workload.lengths import MAX_LENGTH_TOKENS, empirical, parse_length_spec
from tailscope.workload.profile import Overrides, Profile, apply_overrides, flag_overrides
from tailscope.workload.simple import MAX_DURATION_S, MAX_RATE, LoadShape, check_bounds, simple_requests
from tailscope.workload.spec import RequestSpec
from tailscope.workload.tracecontext import check_tracestate, parse_trace_context, with_trace_context

#: options that count as "overrides" of a profile, in the order they are stored with the run
_OVERRIDABLE = (
    "rate", "concurrency", "arrival", "burstiness", "duration", "requests", "warmup", "input_tokens",
    "output_tokens", "model", "url", "seed", "endpoint",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Resolved:
    """A bench ready to run: its config, its (lazy) request stream and the live progress counters."""

    config: BenchConfig
    specs: Iterator[RequestSpec]
    progress: Progress


def slos_of(values: Iterable[str | Slo]) -> tuple[Slo, ...]:
    """SLO objects from strings like ``ttft_p99=1.5s`` (or Slo objects, kept)."""
    return tuple(v if isinstance(v, Slo) else parse_slo(v) for v in values)


def resolve(opts: BenchOptions) -> Resolved:
    """Turn options into a validated config and request stream.

    Raises:
        ConfigError / ProfileError: a bad option or file (naming the flag, or file:line and field).
    """
    endpoint = opts.value("endpoint")
    if endpoint not in ("chat", "completions"):
        raise ConfigError(f"--endpoint {endpoint!r}: use chat or completions")
    if opts.profile is not None and opts.replay is not None:
        raise ConfigError("--profile and --replay exclude each other: a trace already fixes times and lengths")
    ratio = parse_trace_context(opts.trace_context)
    tracestate = check_tracestate(opts.tracestate)
    if tracestate is not None and ratio == 0:
        raise ConfigError("--tracestate is sent with traceparent only: add --trace-context on (or a ratio)")
    if opts.otlp_endpoint is not None:
        from tailscope.client.otlp import check_protocol, traces_url

        traces_url(opts.otlp_endpoint)
        check_protocol(opts.otlp_protocol)
        if ratio == 0:
            raise ConfigError(
                "--otlp-endpoint exports the spans of traced requests: add --trace-context on (or a ratio)"
            )
    if opts.from_traces is not None:
        from tailscope.runner.trace_load import resolve_trace_load

        resolved = resolve_trace_load(opts)
    elif opts.dataset is not None:
        if opts.profile is not None or opts.replay is not None:
            raise ConfigError("--dataset gives the prompts of a flag-shaped load; drop --profile/--replay")
        resolved = _dataset(opts)
    elif opts.profile is not None:
        if opts.rate is not None or opts.concurrency is not None:  # flags over the profile's arrival: same bounds
            open_loop = opts.rate is not None
            LoadShape(
                rate=opts.rate, concurrency=None if open_loop else opts.concurrency,
                max_concurrency=opts.concurrency if open_loop else None, requests=1,
            ).validate()  # fmt: skip
        resolved = _profile(opts)
    elif opts.replay is not None:
        resolved = _replay(opts)
    else:
        resolved = _flags(opts)
    if ratio == 0:
        return resolved
    cfg = resolved.config
    settings = {**cfg.settings, "trace_context": ratio, "tracestate": tracestate}
    if opts.otlp_endpoint is not None:
        settings["otlp_endpoint"] = opts.otlp_endpoint
    cfg = replace(
        cfg,
        trace_ratio=ratio,
        tracestate=tracestate,
        settings=settings,
        otlp_endpoint=opts.otlp_endpoint,
        otlp_protocol=opts.otlp_protocol,
    )
    # ids drawn while the stream is produced, ahead of the send path; which requests are traced follows the seed
    specs = with_trace_context(resolved.specs, ratio, seed=cfg.seed, ids=random.Random(secrets.randbits(64)))
    return Resolved(cfg, specs, resolved.progress)


def _flags(opts: BenchOptions) -> Resolved:
    # --rate with --concurrency: an open loop capped at that many in flight (vLLM bench's --max-concurrency)
    cap = opts.concurrency if opts.rate is not None else None
    concurrency = None if opts.rate is not None else (opts.concurrency if opts.concurrency is not None else 1)
    shape = LoadShape(
        concurrency=concurrency,
        max_concurrency=cap,
        rate=opts.rate,
        arrival=opts.value("arrival"),
        burstiness=opts.value("burstiness"),
        requests=opts.requests,
        duration_s=opts.duration,
        warmup=opts.value("warmup"),
    )
    shape.validate()
    if opts.max_rate is not None and opts.rate is not None and opts.rate > opts.max_rate:
        raise ConfigError(f"--rate {opts.rate:g} exceeds --max-rate {opts.max_rate:g}; lower the rate or raise the cap")
    in_dist = parse_length_spec(str(opts.value("input_tokens")), what="--input-tokens")
    out_dist = parse_length_spec(str(opts.value("output_tokens")), what="--output-tokens")
    specs = simple_requests(shape, in_dist, out_dist, seed=opts.value("seed"))
    cfg = _config(opts, concurrency=concurrency, cap=cap)
    cfg = replace(cfg, lengths=(LengthBound("--input-tokens/--output-tokens", in_dist, out_dist),))
    settings = {
        **cfg.settings,
        "mode": "open" if shape.open_loop else "closed",
        "concurrency": concurrency,
        **({"max_concurrency": cap} if cap is not None else {}),
        "rate": opts.rate,
        "arrival": shape.arrival if shape.open_loop else None,
        "burstiness": shape.burstiness if shape.open_loop else None,
        "requests": opts.requests,
        "duration_s": opts.duration,
        "warmup": shape.warmup,
        "input_tokens": str(in_dist),
        "output_tokens": str(out_dist),
    }
    return Resolved(replace(cfg, settings=settings), specs, Progress(total=opts.requests, duration_s=opts.duration))


def _config(opts: BenchOptions, *, concurrency: int | None, cap: int | None = None) -> BenchConfig:
    """The parts of the config common to every source of requests (target, client, timeouts, SLOs); ``cap``: the
    most requests in flight of an open loop."""
    for name, value in (
        ("--timeout-connect", opts.timeout_connect),
        ("--timeout-first-token", opts.timeout_first_token),
        ("--timeout-total", opts.timeout_total),
    ):
        if not value > 0:
            raise ConfigError(f"{name} must be > 0 seconds (got {value})")
        check_bounds((name, value, 86_400.0))
    check_bounds(
        ("--max-rate", opts.max_rate, MAX_RATE), ("--time-scale", opts.time_scale, 1e6),
        ("--duration", opts.duration, MAX_DURATION_S),
    )  # fmt: skip
    if opts.duration is not None and not opts.duration > 0:  # every source of requests (replay, profile, traces)
        raise ConfigError(f"--duration must be > 0 seconds (got {opts.duration:g})")
    if not 0 <= opts.replay_prefix_tokens <= MAX_LENGTH_TOKENS:
        raise ConfigError(f"--replay-prefix-tokens {opts.replay_prefix_tokens}: use 0 to {MAX_LENGTH_TOKENS:,} tokens")
    if opts.replay_prefix_tokens and opts.replay is None:
        raise ConfigError("--replay-prefix-tokens applies to --replay (a Mooncake trace's shared prefixes); drop it")
    if not 0.05 <= opts.scrape_interval <= 3600:
        raise ConfigError(f"--scrape-interval {opts.scrape_interval:g}: use 0.05 to 3,600 seconds")
    if (
        opts.workers is not None
        and opts.workers != "auto"
        and not (isinstance(opts.workers, int) and 1 <= opts.workers <= 1024)
    ):
        raise ConfigError(f"--workers {opts.workers}: use 1 to 1024 worker processes, or auto")
    if opts.preopen_connections is not None and not 0 <= opts.preopen_connections <= 1024:
        raise ConfigError(f"--preopen-connections {opts.preopen_connections}: use 0 (off) to 1024")
    if opts.http_client not in ("raw", "aiohttp"):
        raise ConfigError(f"--http-client {opts.http_client!r}: use raw or aiohttp")
    slos = slos_of(opts.slo)
    extra_body = _extra_body(opts.extra_body)
    headers = _headers(opts.headers)
    template = None
    if opts.request_template is not None:
        from tailscope.io.request_template import load_request_template

        template = load_request_template(opts.request_template)
    endpoint = opts.value("endpoint")
    tokenizer = str(opts.tokenizer) if opts.tokenizer else None
    nonce = None if opts.same_prompts else secrets.randbits(32) | 1
    settings: dict[str, Any] = {
        "prompt_content": "same" if opts.same_prompts else "fresh",
        "endpoint": endpoint,
        "ignore_eos": opts.ignore_eos,
        "slo": [s.key + "=" + f"{s.threshold_ms:g}ms" for s in slos],
        "tokenizer": tokenizer,
        "api_key_env": opts.api_key_env,
        "timeouts_s": [opts.timeout_connect, opts.timeout_first_token, opts.timeout_total],
    }
    if opts.url is None:  # the built-in engine bench starts: one replica at TP 1 (what `plan cost --run` counts)
        settings["engine"] = {"model": opts.builtin_model, "gpu": opts.builtin_gpu, "replicas": 1, "tp": 1}
    if extra_body:
        settings["extra_body"] = extra_body
    if headers:
        settings["headers"] = [name for name, _ in headers]  # names only: values may be credentials
    if template is not None:
        settings["request_template"] = template.settings()
    telemetry = _telemetry_urls(opts.telemetry_url)
    if telemetry:
        settings["telemetry_urls"] = list(telemetry)
    return BenchConfig(
        url=opts.url,
        model=opts.model,
        endpoint=endpoint,
        api_key_env=opts.api_key_env,
        ignore_eos=opts.ignore_eos,
        continuous_usage=opts.continuous_usage,
        timeouts=Timeouts(opts.timeout_connect, opts.timeout_first_token, opts.timeout_total),
        dispatch=DispatchConfig(concurrency=concurrency, duration_s=opts.duration, max_in_flight=cap),
        requested_rate=opts.rate,
        seed=opts.value("seed"),
        slos=slos,
        tokenizer=tokenizer,
        prompt_nonce=nonce,
        metrics_url=None if opts.metrics_url == "off" else opts.metrics_url,
        scrape_interval_s=opts.scrape_interval,
        telemetry_urls=telemetry,
        settings=settings,
        builtin_model=opts.builtin_model,
        builtin_gpu=opts.builtin_gpu,
        http_client=opts.http_client,
        preopen_connections=opts.preopen_connections,
        warm_connections=opts.warm_connections,
        stream_records=opts.stream_records,
        extra_body=extra_body,
        headers=headers,
        template=template,
    )


def _telemetry_urls(value: str | Sequence[str]) -> tuple[str, ...]:
    """``--telemetry-url``: one URL or several (a comma-separated string is split), each ``http(s)://HOST:PORT/...``."""
    items = [value] if isinstance(value, str) else list(value)
    urls = tuple(u.strip() for item in items for u in str(item).split(",") if u.strip())
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise ConfigError(
                f"--telemetry-url {u!r}: give the exporter's URL, e.g. http://HOST:9400/metrics (DCGM) or "
                "http://HOST:9100/metrics (node exporter)"
            )
    return urls


def _extra_body(value: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """``--extra-body``: a mapping, a JSON object as text, or ``@FILE`` holding one."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    text, where = value, "--extra-body"
    if value.startswith("@"):
        from tailscope.files import read_user_text

        text, where = read_user_text(value[1:], what="--extra-body file"), value[1:]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); give an object such as "
            '\'{"temperature": 0.7, "top_p": 0.9}\''
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a JSON object of body fields is needed (got {type(data).__name__})")
    reserved = sorted({"stream", "model"} & set(data))
    if reserved:
        raise ConfigError(f"{where}: {reserved[0]!r} is set by tailscope (use --model; streams are always on)")
    return data


def _headers(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--header NAME:VALUE`` (repeatable)."""
    from tailscope.io.request_template import check_header

    out = []
    for raw in values:
        name, sep, value = raw.partition(":")
        try:
            if not sep:
                raise ValueError("use NAME:VALUE")
            check_header(name.strip(), value.strip())
        except ValueError as exc:
            raise ConfigError(f"--header {raw.split(':')[0]!r}: {exc} (e.g. --header 'X-Tenant: blue')") from None
        out.append((name.strip(), value.strip()))
    return tuple(out)


def overrides_from(opts: BenchOptions) -> Overrides:
    """The profile fields that the given options replace (options > file)."""

    def pick(name: str) -> Any:
        if not opts.given(name):
            return None
        value = getattr(opts, name)
        return str(value) if name in ("input_tokens", "output_tokens") else value

    return flag_overrides(pick, slos=slos_of(opts.slo) if opts.slo else None)


def _primed(specs: Iterator[RequestSpec]) -> Iterator[RequestSpec]:
    """Pull the first spec now, so a bad profile fails before the target is contacted (the plan is lazy)."""
    first = next(specs, None)
    return iter(()) if first is None else itertools.chain([first], specs)


def _load_profile(opts: BenchOptions) -> Profile:
    from tailscope.io.profile import load_profile

    assert opts.profile is not None
    return load_profile(Path(opts.profile))


def _profile(opts: BenchOptions) -> Resolved:
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
        specs = _primed(specs_iter)
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
    cfg = _config(common, concurrency=None if open_loop else arr.concurrency, cap=cap)
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
    count = _token_counter(opts) if any(st.template is not None for _, st in steps) else None
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


def _replay(opts: BenchOptions) -> Resolved:
    from tailscope.io.replay import read_replay
    from tailscope.workload.replay import replay_requests

    assert opts.replay is not None
    for flag, name in (("--rate", "rate"), ("--concurrency", "concurrency")):
        if opts.given(name):
            raise ConfigError(
                f"{flag} does not apply to --replay: the trace fixes the send times; use --time-scale to speed up "
                "(0.5 = twice as fast) or slow down"
            )
    check_bounds(("--time-scale", opts.time_scale, 1e6))  # inf made NaN send times (found by fuzz_cli)
    if not opts.time_scale > 0:
        raise ConfigError(f"--time-scale must be > 0 (got {opts.time_scale:g}); 0.5 replays twice as fast")
    rows = read_replay(Path(opts.replay), fmt=opts.replay_format)
    specs = sessions_follow_turn0(
        replay_requests(
            rows,
            seed=opts.value("seed"),
            time_scale=opts.time_scale,
            prefix_tokens=opts.replay_prefix_tokens,
            warmup=opts.value("warmup"),
            max_requests=opts.requests,
            duration_s=opts.duration,
        )
    )
    if not specs:
        raise ConfigError(f"--replay {opts.replay}: no request falls inside --duration/--requests")
    last_s = max((s.at_ns or 0) for s in specs) / 1e9
    if last_s > MAX_DURATION_S:
        raise ConfigError(
            f"--replay {opts.replay}: the trace spans {last_s / 86_400:,.0f} days after --time-scale (more than "
            f"{MAX_DURATION_S / 86_400:g}); check its timestamps' unit, speed it up with --time-scale or cut it with "
            "--duration"
        )
    firsts = [s for s in specs if s.at_ns is not None]
    mean_rate = (len(firsts) - 1) / last_s if last_s > 0 and len(firsts) > 1 else 1.0
    if opts.max_rate is not None and mean_rate > opts.max_rate:
        raise ConfigError(
            f"--replay {opts.replay}: the trace's mean rate {mean_rate:.3g}/s exceeds --max-rate {opts.max_rate:g}; "
            "slow it down with --time-scale or raise the cap"
        )
    cfg = _config(opts, concurrency=None)
    settings = {
        **cfg.settings,
        "mode": "replay",
        "concurrency": None,
        "rate": None,
        "arrival": None,
        "requests": opts.requests,
        "duration_s": opts.duration,
        "warmup": opts.value("warmup"),
        "input_tokens": "replay",
        "output_tokens": "replay",
        "replay": str(opts.replay),
        "replay_format": opts.replay_format,
        "time_scale": opts.time_scale,
        **({"replay_prefix_tokens": opts.replay_prefix_tokens} if opts.replay_prefix_tokens else {}),
    }
    cfg = replace(
        cfg,
        requested_rate=None,
        settings=settings,
        profile_name=f"replay:{Path(opts.replay).name}",
        saturation_windows=(),
        lengths=(
            LengthBound(
                f"--replay {opts.replay}",
                empirical([s.input_tokens for s in specs]),
                empirical([s.output_tokens for s in specs]),
            ),
        ),
    )
    return Resolved(cfg, iter(specs), Progress(total=len(specs), duration_s=opts.duration))


def _dataset(opts: BenchOptions) -> Resolved:
    """Real prompts from a dataset file, sent with the load shape of the flags (or at the rows' own times)."""
    from tailscope.io.datasets import filter_rows, read_dataset
    from tailscope.workload.datasets import dataset_requests

    assert opts.dataset is not None
    data = read_dataset(opts.dataset, turns=opts.dataset_turns)
    count = _token_counter(opts)
    rows = filter_rows(data.rows, min_tokens=opts.dataset_min_input, max_tokens=opts.dataset_max_input, count=count)
    if not rows:
        raise ConfigError(
            f"--dataset {opts.dataset}: no row has a prompt of {opts.dataset_min_input or 1}–"
            f"{opts.dataset_max_input or '∞'} tokens ({len(data.rows)} rows read); widen the length filter"
        )
    conversations = conversations_of(rows)
    timed = all(c[0].timestamp_s is not None for c in conversations)
    if timed and (opts.given("rate") or opts.given("concurrency")):
        raise ConfigError(
            f"--dataset {opts.dataset}: its rows have timestamp_s, so they fix the send times; drop "
            "--rate/--concurrency (use --time-scale)"
        )
    cap = opts.concurrency if opts.rate is not None and not timed else None
    concurrency = None if timed or opts.rate is not None else (opts.concurrency if opts.concurrency is not None else 1)
    requests = opts.requests
    if timed and requests is None and opts.duration is None:
        requests = sum(len(c) for c in conversations)  # the whole file, once
    shape = LoadShape(
        concurrency=concurrency, max_concurrency=cap, rate=None if timed else opts.rate, arrival=opts.value("arrival"),
        burstiness=opts.value("burstiness"), requests=requests, duration_s=opts.duration, warmup=opts.value("warmup"),
    )  # fmt: skip
    shape.validate()
    out = parse_length_spec(str(opts.output_tokens), what="--output-tokens") if opts.given("output_tokens") else None
    specs = dataset_requests(
        conversations, shape, seed=opts.value("seed"), sample=opts.dataset_sample, output_tokens=out, count=count,
        time_scale=opts.time_scale,
    )  # fmt: skip
    first = next(specs, None)  # a bad option fails now, before the target is contacted
    stream: Iterator[RequestSpec] = iter(()) if first is None else itertools.chain([first], specs)
    cfg = _config(replace(opts, requests=requests), concurrency=concurrency, cap=cap)
    in_lengths = [count(r.text()) for r in rows]
    out_lengths = [first.output_tokens] if first is not None else [1]
    settings = {
        **cfg.settings,
        "mode": "replay" if timed else ("open" if shape.open_loop else "closed"),
        "concurrency": concurrency,
        **({"max_concurrency": cap} if cap is not None else {}),
        "rate": None if timed else opts.rate,
        "arrival": shape.arrival if shape.open_loop else None,
        "burstiness": shape.burstiness if shape.open_loop else None,
        "requests": requests,
        "duration_s": opts.duration,
        "warmup": shape.warmup,
        "input_tokens": "dataset",
        "output_tokens": str(out) if out is not None else "dataset",
        "dataset": opts.dataset,
        "dataset_rows": len(rows),
        "dataset_turns": opts.dataset_turns,
        "dataset_sample": opts.dataset_sample,
    }
    cfg = replace(
        cfg,
        requested_rate=None if timed else opts.rate,
        settings=settings,
        profile_name=f"dataset:{Path(data.name.split(':')[-1]).name}",
        saturation_windows=() if timed else None,
        lengths=(LengthBound(f"--dataset {opts.dataset}", empirical(in_lengths), empirical(out_lengths)),),
    )
    total = requests if requests is not None else None
    return Resolved(cfg, stream, Progress(total=total, duration_s=opts.duration))


def _token_counter(opts: BenchOptions) -> Callable[[str], int]:
    """Tokens of a text: with ``--tokenizer`` exact, else about four characters a token."""
    from tailscope.io.datasets import approx_tokens

    if opts.tokenizer is None:
        return approx_tokens
    from tailscope.io.tokenizer import load_tokenizer

    tok = load_tokenizer(str(opts.tokenizer))
    return lambda text: max(1, len(tok.encode(text, add_special_tokens=False).ids))


def conversations_of(rows: Sequence[DatasetRow]) -> list[Conversation]:
    """Dataset rows as conversations, in file order: a row with its later turns, a single row, or the rows sharing a
    ``session`` (in ``turn`` order, at the position of the session's first row)."""
    from tailscope.workload.datasets import Turn

    def turn(r: DatasetRow) -> Turn:
        return Turn(r.prompt, r.messages, r.reference, r.max_tokens, r.request_class, r.timestamp_s)

    def later(r: DatasetRow, prompt: str, reference: str | None) -> Turn:
        return Turn(prompt, None, reference, r.max_tokens, r.request_class, None)

    groups: list[list[DatasetRow]] = []
    by_session: dict[str, list[DatasetRow]] = {}
    for r in rows:
        if r.session is not None and not r.turns:
            if r.session not in by_session:
                by_session[r.session] = []
                groups.append(by_session[r.session])
            by_session[r.session].append(r)
        else:
            groups.append([r])
    out: list[Conversation] = []
    for g in groups:
        if len(g) == 1 and g[0].turns:
            out.append((turn(g[0]), *(later(g[0], p, ref) for p, ref in g[0].turns)))
        else:
            g.sort(key=lambda m: m.turn if m.turn is not None else 0)
            out.append(tuple(turn(m) for m in g))
    return out
