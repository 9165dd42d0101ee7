"""A bench's target reached: the built-in engine started or the URL checked, a transport opened, preflighted."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from tailscope.client.rawhttp import RawHttpTransport
from tailscope.client.request import build_body, without_extensions
from tailscope.client.transport import AioHttpTransport, Transport
from tailscope.errors import ConfigError
from tailscope.records import Target
from tailscope.runner.bench_config import DEFAULT_API_KEY_ENV, BenchConfig
from tailscope.runner.preflight import (
    ACCEPTS_EXTENSIONS,
    SCALE_SAMPLE_TOKENS,
    check_context,
    check_reachable,
    preflight,
    preflight_template,
    probe_dialect,
    prompt_scale_warning,
    server_prompt_scale,
)
from tailscope.runner.telemetry import probe_metrics


def _normalize_url(url: str) -> str:
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        raise ConfigError(f"--url {url!r}: expected http://HOST:PORT or https://…")
    from urllib.parse import urlsplit

    try:  # an unclosed [IPv6 bracket or a port out of range raised ValueError on the first request
        parts = urlsplit(u)
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"--url {url!r}: {exc}; expected http://HOST:PORT or https://…") from None
    if not parts.hostname:
        raise ConfigError(f"--url {url!r}: no host; expected http://HOST:PORT or https://…")
    if u.endswith("/v1"):
        u = u[:-3]
    return u


def make_transport(kind: str, base_url: str, **kw: Any) -> Transport:
    """The HTTP transport by name: ``raw`` (default) or ``aiohttp``."""
    if kind == "raw":
        return RawHttpTransport(base_url, **kw)
    kw.pop("arrival_stamp", None)  # aiohttp reads its sockets itself: user-space stamps only
    if kind == "aiohttp":
        return AioHttpTransport(base_url, **kw)
    raise ConfigError(f"--http-client {kind!r}: use raw or aiohttp")


#: at most this many connections are opened before the load starts (auto and explicit alike)
PREOPEN_CAP = 1024
#: open loop, auto: connections for this many seconds of arrivals at the requested rate
PREOPEN_OPEN_LOOP_S = 2.0


def preopen_count(cfg: BenchConfig, share: int | None = None) -> int:
    """How many connections to open before the first send: ``cfg.preopen_connections`` when given, else the closed
    loop's concurrency (``share``: a worker's slots), else ~2 s of arrivals at the requested rate; capped."""
    if cfg.preopen_connections is not None:
        n = cfg.preopen_connections
    elif share is not None:
        n = share
    elif cfg.dispatch.concurrency:
        n = cfg.dispatch.concurrency
    elif cfg.requested_rate:
        n = int(cfg.requested_rate * PREOPEN_OPEN_LOOP_S + 0.999)
    else:
        n = 0
    return max(0, min(n, PREOPEN_CAP))


async def preopen_transport(transport: Transport, n: int, *, warm_path: str | None) -> int:
    """Open (and warm) ``n`` pooled connections when the transport can (the raw one); returns how many are idle."""
    pre = getattr(transport, "preopen", None)
    if pre is None or n <= 0:
        return 0
    return int(await pre(n, warm_path=warm_path))


def warm_path(cfg: BenchConfig) -> str | None:
    """The GET that warms a pre-opened connection (``--warm-connections``), or None."""
    return "/v1/models" if cfg.warm_connections and cfg.template is None else None


def auth_header(env_name: str) -> str | None:
    key = os.environ.get(env_name)
    return f"Bearer {key}" if key else None


@dataclass(slots=True)
class TargetSession:
    """A reachable, preflighted target: what both the single-process and the distributed run start from."""

    base_url: str
    transport: Transport
    target: Target
    metrics_url: str | None
    warnings: tuple[str, ...] = ()  # what preflight found worth saying in the run's summary
    refused: frozenset[str] = frozenset()  # API extensions the server refused (sent without them)


async def open_target(
    cfg: BenchConfig, stack: AsyncExitStack, on_target: Callable[[Target], None] | None = None
) -> TargetSession:
    """Start the built-in engine (no ``cfg.url``) or normalize the URL; open a transport, preflight, probe /metrics.

    Everything opened is closed by ``stack``.
    """
    builtin = cfg.url is None
    description = ""
    if builtin:
        from tailscope.serve.embedded import start_embedded_server

        embedded = await stack.enter_async_context(start_embedded_server(model=cfg.builtin_model, gpu=cfg.builtin_gpu))
        base_url, description = embedded.base_url, embedded.description
    else:
        assert cfg.url is not None
        base_url = _normalize_url(cfg.url)
    max_conn = cfg.dispatch.concurrency or cfg.dispatch.max_in_flight or 0
    transport = make_transport(
        cfg.http_client,
        base_url,
        max_connections=max_conn,
        connect_timeout_s=cfg.timeouts.connect_s,
        auth_header=auth_header(cfg.api_key_env),
        arrival_stamp=cfg.arrival_stamp,
    )
    stack.push_async_callback(transport.close)
    if cfg.template is not None:
        info = await preflight_template(base_url, cfg.model)
    else:
        info = await preflight(transport, base_url, cfg.model, api_key_env=cfg.api_key_env)
    scale = 1.0
    said: tuple[str, ...] = ()
    if not builtin and cfg.tokenizer is None and cfg.template is None and cfg.lengths:
        # the prompts' lengths are the load generator's estimate: have the server count one (vLLM's /tokenize)
        from tailscope.workload.prompts import PromptSynthesizer

        sample = PromptSynthesizer(None).make(SCALE_SAMPLE_TOKENS, seed=0)
        counted = await server_prompt_scale(transport, info.model, sample, SCALE_SAMPLE_TOKENS)
        if counted is not None:
            warning = prompt_scale_warning(info.model, counted[0], counted[1], SCALE_SAMPLE_TOKENS)
            if warning is not None:
                scale, said = counted[0], (warning,)
    warnings = (*said, *check_context(cfg.lengths, info.max_model_len, info.model, prompt_scale=scale))
    if cfg.api_key_env != DEFAULT_API_KEY_ENV and not os.environ.get(cfg.api_key_env):
        # the user named a variable on purpose: an unset one is a typo or a missing export, not "no key needed"
        warnings = (
            *warnings,
            f"--api-key-env {cfg.api_key_env}: that variable is not set (or empty); requests carry no API key",
        )
    refused: frozenset[str] = frozenset()
    if not builtin and cfg.template is None and cfg.probe_dialect and info.owned_by not in ACCEPTS_EXTENSIONS:
        probe = cfg.client_options(info.model)

        def body_for(dropped: frozenset[str]) -> bytes:
            return build_body(without_extensions(probe, dropped), "Say hi.", 1)

        refused, said = await probe_dialect(transport, probe.path, body_for)
        warnings = (*warnings, *said)
    for mixed in cfg.mixed_traffic:
        await check_reachable(mixed.name, mixed.url)
    target = Target(url=base_url, model=info.model, endpoint=cfg.endpoint, builtin=builtin, description=description)
    if on_target is not None:
        on_target(target)
    metrics_url = cfg.metrics_url
    if metrics_url == "auto":
        metrics_url = base_url + "/metrics" if await probe_metrics(transport, base_url + "/metrics") else None
    return TargetSession(
        base_url=base_url,
        transport=transport,
        target=target,
        metrics_url=metrics_url,
        warnings=warnings,
        refused=refused,
    )
