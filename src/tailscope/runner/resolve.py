"""Resolve :class:`BenchOptions` into a validated :class:`BenchConfig`, a request stream and progress counters.

The sources of requests: the options alone (one class, one arrival process; here), a workload profile
(``profile_load.py``), a replayed trace (``replay_load.py``), a dataset of prompts (``dataset_load.py``) or a
trace set's call graphs (``trace_load.py``); what they share is in ``base_config.py``. Resolution is options > file >
defaults, field by field: only options that were given (not None) override the profile. Every error — a bad flag, a
bad profile line, conflicting options — is raised here, before the target is contacted.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import replace

from tailscope.errors import ConfigError
from tailscope.runner.base_config import Resolved, base_config, flag_shape, shape_settings
from tailscope.runner.dataset_load import resolve_dataset
from tailscope.runner.options import BenchOptions
from tailscope.runner.preflight import LengthBound
from tailscope.runner.profile_load import resolve_profile
from tailscope.runner.progress import Progress
from tailscope.runner.replay_load import resolve_replay
from tailscope.workload.lengths import parse_length_spec
from tailscope.workload.simple import LoadShape, simple_requests
from tailscope.workload.tracecontext import check_tracestate, parse_trace_context, with_trace_context


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
        resolved = resolve_dataset(opts)
    elif opts.profile is not None:
        if opts.rate is not None or opts.concurrency is not None:  # flags over the profile's arrival: same bounds
            open_loop = opts.rate is not None
            LoadShape(
                rate=opts.rate, concurrency=None if open_loop else opts.concurrency,
                max_concurrency=opts.concurrency if open_loop else None, requests=1,
            ).validate()  # fmt: skip
        resolved = resolve_profile(opts)
    elif opts.replay is not None:
        resolved = resolve_replay(opts)
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
    shape = flag_shape(opts, requests=opts.requests)
    if opts.max_rate is not None and opts.rate is not None and opts.rate > opts.max_rate:
        raise ConfigError(f"--rate {opts.rate:g} exceeds --max-rate {opts.max_rate:g}; lower the rate or raise the cap")
    in_dist = parse_length_spec(str(opts.value("input_tokens")), what="--input-tokens")
    out_dist = parse_length_spec(str(opts.value("output_tokens")), what="--output-tokens")
    specs = simple_requests(shape, in_dist, out_dist, seed=opts.value("seed"))
    cfg = base_config(opts, concurrency=shape.concurrency, cap=shape.max_concurrency)
    cfg = replace(cfg, lengths=(LengthBound("--input-tokens/--output-tokens", in_dist, out_dist),))
    settings = {**cfg.settings, **shape_settings(shape), "input_tokens": str(in_dist), "output_tokens": str(out_dist)}
    return Resolved(replace(cfg, settings=settings), specs, Progress(total=opts.requests, duration_s=opts.duration))
