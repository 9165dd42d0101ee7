"""Worker handles: the driver's view of a worker, as a local process (multiprocessing, spawn) or a Ray actor.

A handle has one method, ``call(method, args)``, which sends a msgpack message and awaits the reply; a worker that
died (process exit, killed actor) raises :class:`WorkerLost` from every pending and later call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import multiprocessing
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from tailscope.errors import TailscopeError
from tailscope.runner.workers.wire import pack, unpack


class WorkerLost(TailscopeError):
    """A worker process or actor died or stopped answering."""


class WorkerHandle(Protocol):
    """The driver's end of one worker."""

    index: int
    kind: str

    async def call(self, method: str, args: list[Any], timeout_s: float | None = None) -> Any:
        """Send one message; return the worker's reply value.

        Raises:
            WorkerLost: the worker is gone (or did not answer within ``timeout_s``).
        """
        ...

    async def shutdown(self) -> None:
        """Ask the worker to exit and make sure it does (kill after a short wait)."""
        ...


# ---- local processes --------------------------------------------------------------------------------------------


def process_main(conn: Connection) -> None:
    """Entry point of a worker process: serve driver messages until ``close`` or the driver goes away."""
    # Ctrl-C reaches the whole process group; only the driver decides how the run stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(_serve(conn))


async def _serve(conn: Connection) -> None:
    from tailscope.runner.workers.worker import WorkerCore

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[bytes | None] = asyncio.Queue()

    def reader() -> None:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            loop.call_soon_threadsafe(inbox.put_nowait, data)

    threading.Thread(target=reader, name="tailscope-worker-inbox", daemon=True).start()
    # replies are written from one extra thread so a large record batch never blocks the event loop
    sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tailscope-worker-outbox")
    core = WorkerCore()
    try:
        while True:
            data = await inbox.get()
            if data is None:  # the driver is gone: stop sending load
                await core.call("close", [])
                return
            msg_id, method, args = unpack(data)
            try:
                reply = [msg_id, True, await core.call(method, args)]
            except Exception as exc:
                reply = [msg_id, False, f"{type(exc).__name__}: {exc}"]
            try:
                await loop.run_in_executor(sender, conn.send_bytes, pack(reply))
            except OSError:
                await core.call("close", [])
                return
            if method == "close":
                return
    finally:
        sender.shutdown(wait=False)


class ProcessWorker:
    """A worker in a local process started with the ``spawn`` context (no inherited sockets or loops)."""

    kind = "process"

    def __init__(self, index: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.index = index
        self._conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=process_main, args=(child,), name=f"tailscope-worker-{index}", daemon=True)
        self.proc.start()
        child.close()
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._lost: str | None = None
        self._loop = asyncio.get_running_loop()
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"tailscope-driver-inbox-{index}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def _read(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                self._to_loop(self._fail_all, "the worker process exited")
                return
            if not self._to_loop(self._resolve, data):
                return

    def _to_loop(self, fn: Callable[[Any], None], arg: Any) -> bool:
        """Hand ``fn(arg)`` to the driver's loop; False once that loop has closed (the run is over: nothing waits)."""
        try:
            self._loop.call_soon_threadsafe(fn, arg)
        except RuntimeError:  # "Event loop is closed": the worker outlived the run's loop
            return False
        return True

    def _resolve(self, data: bytes) -> None:
        msg_id, ok, value = unpack(data)
        fut = self._pending.pop(msg_id, None)
        if fut is None or fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(WorkerLost(f"worker {self.index}: {value}"))

    def _fail_all(self, why: str) -> None:
        code = self.proc.exitcode
        self._lost = why + (f" (exit code {code})" if code is not None else "")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(WorkerLost(f"worker {self.index}: {self._lost}"))
        self._pending.clear()

    async def call(self, method: str, args: list[Any], timeout_s: float | None = None) -> Any:
        if self._lost is not None:
            raise WorkerLost(f"worker {self.index}: {self._lost}")
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._pending[msg_id] = fut
        try:
            with self._send_lock:
                self._conn.send_bytes(pack([msg_id, method, args]))
        except OSError:
            self._pending.pop(msg_id, None)
            self._fail_all("the pipe to the worker broke")
            raise WorkerLost(f"worker {self.index}: {self._lost}") from None
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            self._pending.pop(msg_id, None)
            raise WorkerLost(f"worker {self.index}: no answer to {method!r} within {timeout_s:g} s") from None

    async def shutdown(self) -> None:
        if self._lost is None and self.proc.is_alive():
            with contextlib.suppress(WorkerLost, OSError):
                await self.call("close", [], timeout_s=15)
        await asyncio.to_thread(self.proc.join, 5)
        if self.proc.is_alive():
            self.proc.kill()
            await asyncio.to_thread(self.proc.join, 5)
        with contextlib.suppress(OSError):
            self._conn.close()


async def start_process_workers(n: int) -> list[ProcessWorker]:
    """Start ``n`` local worker processes (they import tailscope and wait for ``setup``)."""
    return [ProcessWorker(i) for i in range(n)]
