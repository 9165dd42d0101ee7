"""What a user asks of a bench run, before resolution: :class:`BenchOptions`.

One frozen dataclass is the whole vocabulary of a bench — the keyword arguments of :func:`tailscope.bench`, the
flags of ``tailscope bench`` and the fields a workload profile can set. Resolution (:mod:`tailscope.runner.resolve`)
turns it into a :class:`~tailscope.runner.bench_config.BenchConfig` and a request stream.

Fields a profile can also set default to ``None``, meaning "not given": a profile's value then applies, else the
documented default. A value that is given always wins over the profile (options > file > defaults).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from tailscope.errors import ConfigError

if TYPE_CHECKING:  # an annotation only: the options (and the flags built from them) load without numpy
    from tailscope.metrics.slo import Slo

#: the defaults of the fields that a profile can set (None in :class:`BenchOptions` = not given)
DEFAULTS: dict[str, Any] = {
    "endpoint": "chat",
    "arrival": "poisson",
    "burstiness": 1.0,
    "warmup": 0,
    "input_tokens": "256",
    "output_tokens": "128",
    "seed": 0,
}

#: the fields a profile can set too: a command line gives them only when typed (see :meth:`BenchOptions.from_flags`)
PROFILE_FIELDS = frozenset(
    ("url", "model", "endpoint", "concurrency", "rate", "arrival", "burstiness", "requests", "duration", "warmup",
     "input_tokens", "output_tokens", "seed", "slo")
)  # fmt: skip

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """The options of one bench run (all keyword arguments of :func:`tailscope.bench`).

    Attributes:
        url: API root of the target (``http://HOST:PORT``); ``None`` starts the built-in simulated engine.
        model: model name to request (default: the first one the server lists).
        endpoint: ``chat`` (``/v1/chat/completions``, default) or ``completions``.
        profile: a workload profile YAML (path) — classes, sessions, shared prefixes, a rate curve.
        replay: a trace of requests to replay (JSONL ``timestamp_s``/``input_tokens``/``output_tokens``, Mooncake
            or Azure CSV).
        replay_format: ``auto``, ``tailscope``, ``mooncake`` or ``azure``.
        time_scale: multiply replayed times (0.5 = twice as fast).
        replay_prefix_tokens: for a Mooncake replay, the length of the shared prefix given to requests whose first
            block hash is equal (0 = no shared prefixes), so prefix caching behaves as in the trace.
        concurrency: closed loop: requests kept in flight (default 1 when no ``rate`` is given).
        stagger: closed loop: start the slots over this many seconds — slot ``i`` of ``C`` sends its first request
            ``i / C × stagger`` after the start (default: all at once, as vLLM's ``bench serve`` does). ``sim``
            spreads its clients over one request's lifetime unless told otherwise (docs/engine.md, "tailscope
            sim").
        rate: open loop: requests per second.
        arrival: open-loop process: ``constant``, ``poisson`` (default) or ``gamma``.
        burstiness: gamma shape (< 1 burstier; 1 = Poisson).
        requests: stop after this many requests (warmup included).
        duration: stop starting requests after this many seconds. A run needs ``requests`` or ``duration``.
        warmup: the first N requests are warmup: stored, excluded from statistics.
        input_tokens: prompt length: ``N``, ``uniform:A:B``, ``normal:M:S`` or ``lognormal:MED:SIG`` (default 256).
        output_tokens: ``max_tokens`` in the same forms (default 128).
        seed: seed of lengths, prompts and arrivals (default 0).
        slo: SLOs such as ``ttft_p99=1.5s`` (or :class:`~tailscope.metrics.slo.Slo` objects).
        tokenizer: a ``tokenizer.json`` for exact prompt and token counts.
        api_key_env: environment variable holding the API key (never stored).
        ignore_eos: send ``ignore_eos`` so outputs have exactly ``max_tokens`` tokens (vLLM, SGLang).
        continuous_usage: ask vLLM for usage on every chunk.
        timeout_connect, timeout_first_token, timeout_total: per-request timeouts in seconds.
        metrics_url: Prometheus endpoint to scrape: ``auto`` (``URL/metrics`` when it answers), ``off`` or a URL.
        scrape_interval: seconds between scrapes of it (default 1; a short run wants a shorter interval to see its
            queue at all).
        max_rate: refuse schedules faster than this many requests/s.
        workers: spread the load over this many worker processes (Ray actors with ``ray``); ``"auto"`` picks the
            count from the projected token-event rate and the client's measured per-event cost.
        ray: run the workers as Ray actors: ``auto``, ``local`` or a cluster address.
        builtin_model, builtin_gpu: what the built-in engine simulates (no ``url``).
        http_client: ``raw`` (lean, stamps tokens at the socket; default) or ``aiohttp``.
        arrival_stamp: ``auto`` (the default: ``kernel`` where possible, else ``user``), ``kernel`` (the kernel's
            receive time, ``SO_TIMESTAMPNS``; ``raw`` client, Linux, plain TCP — TLS keeps ``user``) or ``user`` (a
            read stamped when the event loop delivers it).
        dataset: real prompts from a file, ``FORMAT:PATH`` (``sharegpt``, ``jsonl``, ``text``, ``csv:COLUMN``,
            ``parquet``, ``arrow``; see :mod:`tailscope.io.datasets`).
        dataset_turns: ``first`` (a conversation's first user turn) or ``all`` (every turn, as one session).
        dataset_sample: ``random`` (seeded order, default) or ``sequential`` (file order); rows repeat only when the
            run outlasts the file.
        dataset_min_input, dataset_max_input: keep rows whose prompt has this many tokens at least / at most.
        same_prompts: send the same prompt text as every other ``same_prompts`` run with this seed (warm caches on
            purpose); by default each run's text is its own (cold caches), while lengths, classes and arrivals still
            follow the seed.
        extra_body: JSON fields merged into every request body (``temperature``, ``top_p``, ``stop``, ``tools``,
            ``response_format``, reasoning options, …): a mapping, a JSON object as text, or ``@FILE`` holding one.
            A profile class's ``extra_body`` is merged over it for that class.
        headers: extra request headers, ``NAME:VALUE`` each (values are sent, never stored).
        request_template: a YAML/JSON file describing a non-OpenAI streaming API (path, body with ``{{prompt}}``
            placeholders, how to read the answer); see :mod:`tailscope.io.request_template`.
        trace_context: send a W3C ``traceparent`` on requests: ``"off"`` (default), ``"on"`` (every request) or a
            ratio in (0, 1] (``0.1`` or ``"0.1"``: that share, drawn from the seed so it repeats); the trace id and
            client span id become fields of each traced record (``tailscope trace join`` keys on them).
        tracestate: a W3C ``tracestate`` value sent beside ``traceparent`` (traced requests only).
        telemetry_url: host/GPU exporters scraped beside the engine's ``/metrics`` on the run's clock: a DCGM
            exporter (``http://HOST:9400/metrics``) or a node exporter (``:9100/metrics``), one URL or several; their
            figures land in ``summary.gpu`` (GPU utilisation, memory, bandwidth, power, energy per output token,
            host CPU) and feed diagnose (see docs/metrics.md).
        from_traces: trace → load: replay the LLM calls of this ingested trace set as sessions that keep each
            trace's call order, parallel fan-outs and gaps (``requests`` = how many traces, default 100).
        traces_db: the store holding that trace set (default: the command line's store).
        preopen_connections: connections opened before the first send so the first wave does not wait for
            connects (``None`` = auto: the concurrency, or ~2 s of arrivals at the rate; ``0`` = off; at most 1,024).
        warm_connections: also send one ``GET /v1/models`` on each pre-opened connection before the run.
        stream_records: keep no records in memory while the run goes — they go to the store only, and the summary
            reads them back after the run (long runs and soaks; needs a store).
        otlp_endpoint: export one CLIENT span per traced request to this OTLP/HTTP collector (``http://HOST:4318``;
            needs ``trace_context``): GenAI attributes, first-token and stall events, ids = the record's, so the
            server's spans are its children. Batched off the hot path.
        otlp_protocol: ``protobuf`` (default) or ``json``.
    """

    url: str | None = None
    model: str | None = None
    endpoint: str | None = None
    profile: PathLike | None = None
    replay: PathLike | None = None
    replay_format: str = "auto"
    time_scale: float = 1.0
    replay_prefix_tokens: int = 0
    concurrency: int | None = None
    stagger: float | None = None
    rate: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    input_tokens: str | int | None = None
    output_tokens: str | int | None = None
    seed: int | None = None
    slo: Sequence[str | Slo] = ()
    tokenizer: PathLike | None = None
    api_key_env: str = "OPENAI_API_KEY"
    ignore_eos: bool = True
    continuous_usage: bool = True
    timeout_connect: float = 10.0
    timeout_first_token: float = 120.0
    timeout_total: float = 600.0
    metrics_url: str = "auto"
    scrape_interval: float = 1.0
    max_rate: float | None = None
    workers: int | str | None = None
    ray: str | None = None
    builtin_model: str = "llama-3.1-8b"
    builtin_gpu: str = "h100-sxm"
    http_client: str = "raw"
    arrival_stamp: str = "auto"
    dataset: str | None = None
    dataset_turns: str = "first"
    dataset_sample: str = "random"
    dataset_min_input: int | None = None
    dataset_max_input: int | None = None
    same_prompts: bool = False
    extra_body: Mapping[str, Any] | str | None = None
    headers: Sequence[str] = ()
    request_template: PathLike | None = None
    trace_context: str | float | bool = "off"
    tracestate: str | None = None
    # host and GPU telemetry (issue 24 item 9)
    telemetry_url: str | Sequence[str] = ()
    # trace → load (issue 19 item 5)
    from_traces: str | None = None
    traces_db: PathLike | None = None
    # client (issue 20)
    preopen_connections: int | None = None
    warm_connections: bool = False
    stream_records: bool = False
    # client spans (issue 21 item 2)
    otlp_endpoint: str | None = None
    otlp_protocol: str = "protobuf"

    def given(self, name: str) -> bool:
        """Whether field ``name`` was given (it then overrides a profile's value)."""
        value = getattr(self, name)
        return value is not None and value != ()

    def value(self, name: str) -> Any:
        """A field's value, or its documented default when it was not given."""
        v = getattr(self, name)
        return DEFAULTS.get(name) if v is None else v

    def with_changes(self, **changes: Any) -> BenchOptions:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @classmethod
    def from_flags(cls, values: Mapping[str, Any], typed: Collection[str]) -> BenchOptions:
        """The options of a command line: ``values`` by parameter name (others are ignored), the fields a profile
        can set kept only when ``typed`` names them, so that a profile's value wins over a flag's default.

        Raises:
            ConfigError: ``workers`` is neither a number nor ``auto``.
        """
        kept = {k: v for k, v in values.items() if k in cls.field_names()}
        kept.update({name: () if name == "slo" else None for name in PROFILE_FIELDS if name not in typed})
        for name in ("slo", "headers", "telemetry_url"):
            kept[name] = tuple(kept.get(name) or ())
        w = kept.get("workers")
        if w is not None and w != "auto":
            try:
                kept["workers"] = int(w)
            except ValueError:
                raise ConfigError(f"--workers {w!r}: give a number of worker processes, or auto") from None
        if kept.get("from_traces") is not None and values.get("db") is not None:
            kept["traces_db"] = values["db"]  # the trace set lives in the bench's own store
        return cls(**kept)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in fields(cls))
