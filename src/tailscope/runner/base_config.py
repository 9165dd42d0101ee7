"""What every source of requests shares when it is resolved: the config's common part and :class:`Resolved`.

The common part is the target, the client, timeouts, SLOs, body fields and headers (:func:`base_config`); each source
(:mod:`~tailscope.runner.resolve`'s flags, a profile, a replay, a dataset, a trace set) adds its load shape.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tailscope.client.kstamp import ARRIVAL_STAMPS, resolve_arrival_stamp
from tailscope.client.openai import Timeouts
from tailscope.errors import ConfigError
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.options import BenchOptions
from tailscope.runner.preflight import LengthBound
from tailscope.runner.progress import Progress
from tailscope.workload.lengths import MAX_LENGTH_TOKENS, empirical
from tailscope.workload.simple import MAX_DURATION_S, MAX_RATE, LoadShape, check_bounds
from tailscope.workload.spec import RequestSpec


@dataclass(frozen=True, slots=True)
class Resolved:
    """A bench ready to run: its config, its (lazy) request stream and the live progress counters."""

    config: BenchConfig
    specs: Iterator[RequestSpec]
    progress: Progress


def slos_of(values: Iterable[str | Slo]) -> tuple[Slo, ...]:
    """SLO objects from strings like ``ttft_p99=1.5s`` (or Slo objects, kept)."""
    return tuple(v if isinstance(v, Slo) else parse_slo(v) for v in values)


#: the options a config takes as given, under the same name
_AS_GIVEN = (
    "url", "model", "api_key_env", "ignore_eos", "continuous_usage", "builtin_model", "builtin_gpu", "http_client",
    "arrival_stamp",
    "preopen_connections", "warm_connections", "stream_records",
)  # fmt: skip


def base_config(opts: BenchOptions, *, concurrency: int | None, cap: int | None = None) -> BenchConfig:
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
    if opts.stagger is not None and not 0 <= opts.stagger <= MAX_DURATION_S:
        raise ConfigError(f"--stagger {opts.stagger:g}: the seconds the clients start over, 0 to {MAX_DURATION_S:g}")
    if opts.stagger is not None and concurrency is None:
        raise ConfigError("--stagger: only a closed loop (--concurrency without --rate) has clients to start; drop it")
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
    if opts.arrival_stamp not in ARRIVAL_STAMPS:
        raise ConfigError(f"--arrival-stamp {opts.arrival_stamp!r}: use auto, kernel or user")
    if opts.arrival_stamp == "kernel" and opts.http_client != "raw":
        raise ConfigError("--arrival-stamp kernel needs --http-client raw (aiohttp reads the socket itself)")
    arrival_stamp = resolve_arrival_stamp(opts.arrival_stamp, http_client=opts.http_client, url=opts.url)
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
    if opts.stagger is not None:  # a closed loop's start (docs/metrics.md)
        settings["stagger_s"] = opts.stagger
    if arrival_stamp != "user":  # what "arrival" means in this run's records (docs/metrics.md)
        settings["arrival_stamp"] = arrival_stamp
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
        endpoint=endpoint,
        timeouts=Timeouts(opts.timeout_connect, opts.timeout_first_token, opts.timeout_total),
        dispatch=DispatchConfig(
            concurrency=concurrency, duration_s=opts.duration, max_in_flight=cap, stagger_s=opts.stagger or 0.0
        ),
        requested_rate=opts.rate,
        seed=opts.value("seed"),
        slos=slos,
        tokenizer=tokenizer,
        prompt_nonce=nonce,
        metrics_url=None if opts.metrics_url == "off" else opts.metrics_url,
        scrape_interval_s=opts.scrape_interval,
        telemetry_urls=telemetry,
        settings=settings,
        extra_body=extra_body,
        headers=headers,
        template=template,
        **{name: getattr(opts, name) for name in _AS_GIVEN},
    )


def flag_shape(opts: BenchOptions, *, requests: int | None, timed: bool = False) -> LoadShape:
    """The load shape the flags give, validated: a closed loop of ``--concurrency`` (1 by default), or an open loop at
    ``--rate`` — capped at ``--concurrency`` in flight when both are given (vLLM bench's ``--max-concurrency``).
    ``timed``: the requests carry their own send times (neither loop)."""
    rate = None if timed else opts.rate
    cap = opts.concurrency if rate is not None else None
    concurrency = None if timed or rate is not None else (opts.concurrency if opts.concurrency is not None else 1)
    shape = LoadShape(
        concurrency=concurrency,
        max_concurrency=cap,
        rate=rate,
        arrival=opts.value("arrival"),
        burstiness=opts.value("burstiness"),
        requests=requests,
        duration_s=opts.duration,
        warmup=opts.value("warmup"),
    )
    shape.validate()
    return shape


def shape_settings(shape: LoadShape, *, mode: str | None = None) -> dict[str, Any]:
    """A load shape as stored with the run (arrival and burstiness only for an open loop; ``mode`` by default open
    or closed)."""
    open_loop = shape.open_loop
    return {
        "mode": mode or ("open" if open_loop else "closed"),
        "concurrency": shape.concurrency,
        **({"max_concurrency": shape.max_concurrency} if shape.max_concurrency is not None else {}),
        "rate": shape.rate,
        "arrival": shape.arrival if open_loop else None,
        "burstiness": shape.burstiness if open_loop else None,
        "requests": shape.requests,
        "duration_s": shape.duration_s,
        "warmup": shape.warmup,
    }


def last_send_s(specs: list[RequestSpec], *, spans: str, fix: str) -> float:
    """The last send time (s from the run start) of requests that carry their own times, refused past the longest
    run (``spans``: what spans, e.g. ``--replay FILE: the trace spans``; ``fix``: what to do)."""
    last_s = max((s.at_ns or 0) for s in specs) / 1e9
    if last_s > MAX_DURATION_S:
        raise ConfigError(
            f"{spans} {last_s / 86_400:,.0f} days after --time-scale (more than {MAX_DURATION_S / 86_400:g}); {fix}"
        )
    return last_s


def at_own_times(
    opts: BenchOptions, specs: list[RequestSpec], *, mode: str, name: str, label: str, **settings: Any
) -> Resolved:
    """A source whose requests carry their own send times (a replay, a trace set): no requested rate, no saturation
    test, and the lengths checked against the served context are the requests' own (``label`` names the source in
    that check). ``settings`` are stored with the run after the mode and the load shape it does not have."""
    cfg = base_config(opts, concurrency=None)
    cfg = replace(
        cfg,
        requested_rate=None,
        settings={**cfg.settings, "mode": mode, "concurrency": None, "rate": None, "arrival": None, **settings},
        profile_name=name,
        saturation_windows=(),
        lengths=(
            LengthBound(label, empirical([s.input_tokens for s in specs]), empirical([s.output_tokens for s in specs])),
        ),
    )
    return Resolved(cfg, iter(specs), Progress(total=len(specs), duration_s=opts.duration))


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
    if not values:
        return ()
    from tailscope.io.request_template import check_header  # pydantic: loaded only when headers are given

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


def primed(specs: Iterator[RequestSpec]) -> Iterator[RequestSpec]:
    """Pull the first spec now, so a bad profile fails before the target is contacted (the plan is lazy)."""
    first = next(specs, None)
    return iter(()) if first is None else itertools.chain([first], specs)


def token_counter(opts: BenchOptions) -> Callable[[str], int]:
    """Tokens of a text: with ``--tokenizer`` exact, else about four characters a token."""
    from tailscope.io.datasets import approx_tokens

    if opts.tokenizer is None:
        return approx_tokens
    from tailscope.io.tokenizer import load_tokenizer

    tok = load_tokenizer(str(opts.tokenizer))
    return lambda text: max(1, len(tok.encode(text, add_special_tokens=False).ids))
