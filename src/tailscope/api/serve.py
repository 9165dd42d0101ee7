"""The built-in simulated engine behind an OpenAI-compatible HTTP server, as a library call: :func:`run_server`
(``tailscope serve``), and :func:`start_builtin_server` (the bench's default target, for an ``async with`` body).
Tokens leave at the step times the engine model computes, on the wall clock."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tailscope.api._support import public
from tailscope.serve.engine_factory import EngineFlags
from tailscope.serve.faults import FaultConfig
from tailscope.serve.options import ServeOptions

if TYPE_CHECKING:  # the server module loads aiohttp: only when a server is started
    from tailscope.serve.embedded import BuiltinServer


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
        flags: engine settings with vLLM's names (TP, dtypes, scheduler limits, calibration, backend, EP, KV
            offload, speculative decoding).
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


@asynccontextmanager
async def start_builtin_server(
    model: str = "llama-3.1-8b", gpu: str = "h100-sxm", *, isolation: str = "process", **engine_options: Any
) -> AsyncIterator[BuiltinServer]:
    """Run the built-in server on a free 127.0.0.1 port for the body of an ``async with`` — what :func:`tailscope.bench`
    starts when it is given no ``url``.

    Starting and stopping run in a worker thread, so the caller's event loop never blocks.

    Args:
        model / gpu: catalog ids (a ``config.json`` path for the model).
        isolation: ``"process"`` (default: ``tailscope serve`` as a child process, so the server's CPU work does not
            disturb the caller's timing) or ``"thread"`` (in this process, on its own event loop).
        **engine_options: engine settings with vLLM's names (``tp``, ``weights_dtype``, ``kv_dtype``,
            ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enable_prefix_caching``,
            ``max_model_len``, ``calibration``, ``gpu_file``), the engine whose costs it runs (``backend``: ``vllm``,
            ``sglang``, ``trtllm``), an MoE model's ``ep``, prefill/decode pools (``disagg``:
            ``"prefill=1x1,decode=1x2:dp2"``, as ``tailscope serve --disagg``), and ``speed``, ``seed``, ``faults``
            (a ``FaultConfig``), ``served_model_name``, ``frontend_latency`` — every
            :class:`~tailscope.serve.engine_factory.EngineFlags` field.

    Yields:
        The running server: ``base_url`` (``http://127.0.0.1:PORT``) and ``description`` (model and hardware).

    Raises:
        ConfigError / CatalogError: an unknown option, model or GPU, or an invalid value (before anything starts).
        PlanError: the model does not fit on the GPU. TargetError: the server could not start.
    """
    from tailscope.errors import InternalError, TailscopeError
    from tailscope.serve.embedded import start_embedded_server

    started = start_embedded_server(model, gpu, isolation=isolation, **engine_options)
    try:
        server = await started.__aenter__()
    except TailscopeError:
        raise
    except Exception as exc:  # one exception tree, as every public function (the cause is kept)
        raise InternalError(f"start_builtin_server failed: {type(exc).__name__}: {exc}") from exc
    try:
        yield server
    except BaseException as exc:
        if not await started.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await started.__aexit__(None, None, None)
