"""A bench run's configuration, resolved before the run starts: :class:`BenchConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from tailscope.client.openai import ClientOptions, Timeouts
from tailscope.client.request import extension_flags
from tailscope.metrics.slo import Slo
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.preflight import LengthBound
from tailscope.workload.profile import MixedTarget
from tailscope.workload.template import RequestTemplate

#: where the API key is read from unless --api-key-env names another variable
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


#: the :class:`ClientOptions` fields a config carries under the same name (all but ``model``, which a run may resolve)
_CLIENT_FIELDS = tuple(f.name for f in fields(ClientOptions) if f.name != "model")


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a bench run needs, resolved (CLI > file > env > defaults) before the run starts.

    Attributes:
        url: target API root; ``None`` = start the built-in simulated engine.
        metrics_url: ``"auto"`` (probe ``<url>/metrics``), an explicit URL, or ``None`` (off).
        settings: the user-facing settings, stored with the run (never secrets).
    """

    url: str | None
    model: str | None
    endpoint: str = "chat"
    api_key_env: str = DEFAULT_API_KEY_ENV
    ignore_eos: bool = True
    continuous_usage: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    requested_rate: float | None = None
    seed: int = 0
    slos: tuple[Slo, ...] = ()
    tokenizer: str | None = None
    prompt_nonce: int | None = None  # fresh prompt text per run (cold caches); None = text from the seed alone
    metrics_url: str | None = "auto"
    telemetry_urls: tuple[str, ...] = ()  # DCGM / node exporters scraped beside the engine (summary.gpu)
    scrape_interval_s: float = 1.0
    flush_interval_s: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    profile_name: str | None = None
    builtin_model: str = "llama-3.1-8b"
    builtin_gpu: str = "h100-sxm"
    sweep_id: str | None = None
    probe: str | None = None  # what this run probes for (calibrate, find-max, twin-check): tagged, never ``latest``
    handle_signals: bool = False
    mixed_traffic: tuple[MixedTarget, ...] = ()  # plain HTTP sent beside the LLM load (profile mixed_traffic)
    # steady stages (start_s, end_s) tested for over-saturation; None = one window when the run is open loop at one
    # constant rate (requested_rate set), () = no test
    saturation_windows: tuple[tuple[float, float], ...] | None = None
    http_client: str = "raw"  # raw (lean asyncio HTTP/1.1, stamps at the socket) | aiohttp
    arrival_stamp: str = "auto"  # auto = kernel where possible | kernel (SO_TIMESTAMPNS; raw, plain TCP) | user
    lengths: tuple[LengthBound, ...] = ()  # the workload's length distributions, checked against the served context
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    class_extra_body: dict[str, dict[str, Any]] = field(default_factory=dict)  # per class, over extra_body
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (values never stored)
    template: RequestTemplate | None = None  # a non-OpenAI API (None: OpenAI-compatible)
    stream_options: bool = True  # send stream_options (usage in the stream)
    probe_dialect: bool = True  # probe which extensions a (non-built-in) server accepts before the run
    trace_ratio: float = 0.0  # share of requests sent with a W3C traceparent (ids precomputed in the request stream)
    tracestate: str | None = None  # W3C tracestate sent beside traceparent
    # client (issue 20): connections opened before the first send (None = auto, 0 = off); warmed with a GET of
    # /v1/models each when warm_connections
    preopen_connections: int | None = None
    warm_connections: bool = False
    # records only go to the store while the run goes (long runs, soaks); the summary reads them back at the end
    stream_records: bool = False
    otlp_endpoint: str | None = None  # where one CLIENT span per traced request goes (OTLP/HTTP)
    otlp_protocol: str = "protobuf"  # protobuf | json

    def without(self, refused: frozenset[str]) -> BenchConfig:
        """This config with the extensions the server refused turned off."""
        return replace(self, **extension_flags(self, refused)) if refused else self

    def client_options(self, model: str) -> ClientOptions:
        """How this run's requests are shaped, for ``model`` (every other :class:`ClientOptions` field is this
        config's field of the same name)."""
        return ClientOptions(model=model, **{name: getattr(self, name) for name in _CLIENT_FIELDS})
