"""The built-in server as a library: the default target of ``tailscope bench`` without ``--url``.

:func:`start_embedded_server` runs it on a free 127.0.0.1 port for the body of an ``async with``: by default as a
child process (``tailscope serve``), so that the bench's event loop and interpreter only run the load generator and
the server's work never delays the client's timestamps; with ``isolation="thread"`` in a background thread with its
own event loop (tests use that to read the server's state)::

    async with start_embedded_server(model="llama-3.1-8b", gpu="h100-sxm") as server:
        print(server.description)   # "llama-3.1-8b on h100-sxm (weights bf16, KV bf16, …)"
        await run_bench(url=server.base_url, ...)

Tests use :class:`EmbeddedServer` directly (also a plain context manager) and may pass any ``ReplicaEngine``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from aiohttp import web

from tailscope.engine.api import ReplicaEngine
from tailscope.errors import ConfigError, TargetError
from tailscope.serve.app import STATE, ServeState, build_app, make_runner
from tailscope.serve.child import ChildServer, StartStop
from tailscope.serve.faults import FaultConfig
from tailscope.serve.options import ServeOptions
from tailscope.serve.site import serve_site

T = TypeVar("T")


class EmbeddedServer(StartStop):
    """The built-in server on ``host`` (a free port by default), in a daemon thread with its own event loop.

    Args:
        engine: the engine to serve (used only from the server's thread once started).
        options: serving options.
        host: interface to bind; ``127.0.0.1`` keeps it private.
        port: port to bind; ``0`` picks a free one.
        start_timeout_s: how long :meth:`start` waits for the server to listen.
    """

    def __init__(
        self,
        engine: ReplicaEngine,
        options: ServeOptions,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout_s: float = 30.0,
    ) -> None:
        options.validate()
        self._engine = engine
        self.options = options
        self.host = host
        self._port = port
        self._start_timeout_s = start_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._app: web.Application | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the running server (no trailing slash, no ``/v1``)."""
        if not self.port:
            raise RuntimeError("the embedded server is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def description(self) -> str:
        """One line naming the simulated model and hardware (bench prints it after "built-in simulated engine")."""
        return self.options.description or self.options.model_name

    @property
    def state(self) -> ServeState:
        """The server's shared state; read it only through :meth:`call` while the server runs."""
        if self._app is None:
            raise RuntimeError("the embedded server is not started")
        return self._app[STATE]

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server thread and wait until it listens; returns :attr:`base_url`.

        Raises:
            TargetError: when the server cannot start (port taken, engine error) or does not start in time.
        """
        if self._thread is not None:
            return self.base_url
        self._thread = threading.Thread(target=self._main, name="tailscope-serve", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.stop()
            raise TargetError(f"the built-in server did not start within {self._start_timeout_s:.0f} s")
        if self._error is not None:
            err = self._error
            self.stop()
            raise TargetError(f"the built-in server could not start on {self.host}:{self._port}: {err}") from err
        return self.base_url

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (live requests are aborted) and join its thread."""
        loop, thread = self._loop, self._thread
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout_s)
        self._thread = None

    def call(self, fn: Callable[[ServeState], T], timeout_s: float = 10.0) -> T:
        """Run ``fn(state)`` on the server's thread and return its result (thread-safe access for tests)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the embedded server is not started")

        async def _run() -> T:
            return fn(self.state)

        return asyncio.run_coroutine_threadsafe(_run(), loop).result(timeout_s)

    # -- the thread -----------------------------------------------------------------------------------------------

    async def _startup(self) -> None:
        self._app = build_app(self._engine, self.options)
        self._runner = make_runner(self._app)
        await self._runner.setup()
        self.port = await serve_site(self._runner, self.host, self._port)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            try:
                loop.run_until_complete(self._startup())
            except BaseException as exc:  # reported to start() in the caller's thread
                self._error = exc
                return
            finally:
                self._ready.set()
            loop.run_forever()
        finally:
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


class BuiltinServer(Protocol):
    """What :func:`start_embedded_server` yields: a running built-in server (in a thread or a child process)."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no ``/v1``)."""
        ...

    @property
    def description(self) -> str:
        """The simulated model and hardware in one line."""
        ...


@asynccontextmanager
async def start_embedded_server(
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    *,
    engine: ReplicaEngine | None = None,
    options: ServeOptions | None = None,
    isolation: str = "process",
    **engine_options: Any,
) -> AsyncIterator[BuiltinServer]:
    """Run the built-in server for ``model`` on ``gpu`` on a free 127.0.0.1 port for the ``async with`` body.

    Starting and stopping happen in a worker thread, so the caller's event loop is never blocked.

    Args:
        model: catalog model id (or a ``config.json`` path, as the engine accepts).
        gpu: catalog GPU id.
        engine: serve this engine (in a thread) instead of building one.
        options: serving options for ``engine`` (thread isolation only).
        isolation: ``"process"`` (default: ``tailscope serve`` as a child process, so the server's CPU work does
            not disturb the caller's timing) or ``"thread"`` (same process, own event loop; tests use it).
        **engine_options: :class:`~tailscope.serve.engine_factory.EngineFlags` fields (``max_num_seqs``, ``tp``, …)
            and ``speed``, ``seed``, ``faults``, ``served_model_name``, ``frontend_latency``.

    Yields:
        The running server (``base_url``, ``description``).

    Raises:
        ConfigError: an unknown option or an invalid value (checked before anything starts).
        TargetError: the server could not start.
    """
    server: EmbeddedServer | ChildServer
    if engine is not None or options is not None or isolation == "thread":
        if engine is None:
            from tailscope.serve.engine_factory import build_replica

            engine, options = build_replica(model, gpu, options=options, **engine_options)
        elif options is None:
            options = ServeOptions(model_name=model, description=f"{model} on {gpu}")
        server = EmbeddedServer(engine, options)
    elif isolation == "process":
        from tailscope.serve.child import flags_from, serve_cli_args
        from tailscope.serve.engine_factory import build_replica

        flags, rest = flags_from(engine_options)
        speed, seed = rest.pop("speed", 1.0), rest.pop("seed", 0)
        if isinstance(speed, bool) or not isinstance(speed, int | float):
            raise ConfigError(f"speed must be a number (got {speed!r})")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seed must be an integer (got {seed!r})")
        faults = rest.pop("faults", None)
        served = rest.pop("served_model_name", None)
        frontend_latency = bool(rest.pop("frontend_latency", True))
        if rest:
            raise ConfigError(f"unknown built-in server option(s): {', '.join(sorted(rest))}")
        if faults is not None and not isinstance(faults, FaultConfig):
            raise ConfigError(f"faults must be a FaultConfig (got {type(faults).__name__})")
        served_name = str(served) if served is not None else None
        # built here too: flags are validated before a process starts, and the description comes from it
        settings: dict[str, Any] = {
            "served_model_name": served_name,
            "speed": float(speed),
            "seed": seed,
            "faults": faults,
            "frontend_latency": frontend_latency,
        }
        _, opts = build_replica(model, gpu, flags=flags, **settings)
        args = serve_cli_args(model, gpu, flags, **settings)
        server = ChildServer(args, description=opts.description, model_name=opts.model_name)
    else:
        raise ConfigError(f"isolation must be 'process' or 'thread' (got {isolation!r})")
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)
