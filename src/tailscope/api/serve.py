"""The built-in simulated engine behind an OpenAI-compatible HTTP server, as a library call: :func:`run_server`
(``tailscope serve``). Tokens leave at the step times the engine model computes, on the wall clock."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from tailscope.api._support import public
from tailscope.serve.engine_factory import EngineFlags
from tailscope.serve.faults import FaultConfig
from tailscope.serve.options import ServeOptions


@public
def run_server(
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    *,
    flags: EngineFlags | None = None,
    faults: FaultConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    speed: float = 1.0,
    seed: int = 0,
    frontend_latency: bool = True,
    otlp_endpoint: str | None = None,
    otlp_spans: str = "phases",
    reasoning_tokens: int = 0,
    on_ready: Callable[[ServeOptions, str], None] | None = None,
    exit_on_stdin_eof: bool = False,
) -> None:
    """Serve the OpenAI API from the simulated engine until SIGINT/SIGTERM (or, with ``exit_on_stdin_eof``, the end
    of standard input).

    Args:
        model / gpu: catalog ids (a ``config.json`` path for the model).
        flags: engine settings with vLLM's names (TP, dtypes, scheduler limits, calibration, backend, EP).
        faults: injected faults (all off by default).
        host / port: where to listen (port 0: a free one).
        served_model_name: the name clients use (default: ``model``).
        speed: engine seconds per wall second.
        seed: seed of response ids, natural output lengths and injected faults.
        frontend_latency: delay requests by the API-server latency the engine model prices (as ``sim`` does).
        otlp_endpoint: export one vLLM-style ``llm_request`` span per request to this OTLP/HTTP collector.
        otlp_spans: ``phases`` (default): with the engine's phases as its child spans (receive, queue, one per
            prefill chunk, decode, stream end); ``request``: the ``llm_request`` span alone.
        reasoning_tokens: act as a reasoning model (the first N output tokens are ``reasoning_content``).
        on_ready: called with the serving options and the base URL once the server listens.

    Raises:
        ConfigError / CatalogError: an unknown model or GPU or an invalid setting, naming it.
        PlanError: the model does not fit on the GPU.
        TargetError: the address cannot be bound.
    """
    from tailscope.serve.engine_factory import build_replica
    from tailscope.serve.server import serve_forever

    engine, options = build_replica(model, gpu, flags=flags, served_model_name=served_model_name, speed=speed,
                                    seed=seed, faults=faults, frontend_latency=frontend_latency)  # fmt: skip
    if otlp_endpoint is not None or reasoning_tokens or otlp_spans != "phases":
        options = dataclasses.replace(
            options, otlp_endpoint=otlp_endpoint, otlp_spans=otlp_spans, reasoning_tokens=reasoning_tokens
        )
        options.validate()
    ready = None if on_ready is None else (lambda url: on_ready(options, url))
    asyncio.run(
        serve_forever(engine, options, host=host, port=port, on_ready=ready, exit_on_stdin_eof=exit_on_stdin_eof)
    )
