"""Workers as Ray actors (``pip install 'tailscope[ray]'``); Ray is imported only when this is used.

Each actor is an async actor holding a :class:`~.worker.WorkerCore`; the driver sends it the same
msgpack messages a local worker process gets, through one actor method. An actor that dies (node lost, process
killed) raises ``RayActorError`` on its calls, which becomes :class:`WorkerLost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from tailscope.errors import ConfigError
from tailscope.runner.workers.handles import ProcessWorker, WorkerLost
from tailscope.runner.workers.wire import pack, unpack


class RayWorkerActor:
    """The actor class (made remote at run time so that importing this module does not need Ray).

    Ray places and supervises the actor; the load itself runs in a child process the actor spawns (the same worker
    process as without Ray), on a clean event loop. Run inside the actor process, the load generator's event loop
    lagged more at p99 than a plain process at the same load. The child exits when the actor dies (its pipe closes).
    """

    def __init__(self) -> None:
        import threading

        # Ray starts workers at nice 15 (RAY_worker_niceness); on a busy node that starves the load generator. Undo
        # it when allowed (root / CAP_SYS_NICE); the nice value is reported either way and warned about.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        self.nice = os.getpriority(os.PRIO_PROCESS, 0)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tailscope-actor-loop", daemon=True)
        self._thread.start()
        self._proc: ProcessWorker = asyncio.run_coroutine_threadsafe(self._spawn(), self._loop).result()

    async def _spawn(self) -> ProcessWorker:
        return ProcessWorker(0)

    def call(self, payload: bytes) -> bytes:
        method, args, timeout_s = unpack(payload)
        fut = asyncio.run_coroutine_threadsafe(self._proc.call(method, args, timeout_s), self._loop)
        value = fut.result()
        if method == "setup" and isinstance(value, dict):
            value["actor_pid"] = os.getpid()
            value["nice"] = self.nice
        return pack(value)

    def shutdown(self) -> None:
        asyncio.run_coroutine_threadsafe(self._proc.shutdown(), self._loop).result(30)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'tailscope[ray]' (or drop --ray for local processes)") from None
    return ray


def cleanup_failed_init(ray: Any) -> None:
    """Stop what a failed ``ray.init`` left behind.

    When a local instance fails to start (its GCS did not publish a port in time) Ray keeps no handle on the processes
    it already launched: they keep running, and their ``Popen`` objects warn when collected. Find those objects, stop
    their processes and reap them.
    """
    import gc
    import subprocess

    ray.shutdown()
    for obj in gc.get_objects():
        if isinstance(obj, subprocess.Popen) and obj.returncode is None and "ray" in str(obj.args):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                obj.kill()
                obj.wait(5)


def connect_ray(address: str) -> Any:
    """Connect to (or, with ``local``, start) a Ray instance; reuse one this process already initialized.

    Args:
        address: ``auto`` (the cluster started with ``ray start``), ``local`` (a private instance on this machine)
            or a cluster address such as ``ray://head:10001`` or ``10.0.0.5:6379``.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    try:
        if address == "local":
            # Ray waits 30 s for its GCS to publish a port; on a load generator's busy cores it can take longer.
            os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        cleanup_failed_init(ray)
        hint = "start one with `ray start --head`, or use --ray local" if address == "auto" else "check the address"
        raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster ({exc}); {hint}") from None
    return ray


class RayWorker:
    """The driver's handle to one Ray actor."""

    kind = "ray"

    def __init__(self, ray: Any, actor_cls: Any, index: int) -> None:
        self.index = index
        self._ray = ray
        self.actor = actor_cls.remote()
        self._lost: str | None = None

    async def call(self, method: str, args: list[Any], timeout_s: float | None = None) -> Any:
        if self._lost is not None:
            raise WorkerLost(f"worker {self.index}: {self._lost}")
        ref = self.actor.call.remote(pack([method, args, timeout_s]))
        try:
            data = await asyncio.wait_for(ref, timeout_s)
        except TimeoutError:
            raise WorkerLost(f"worker {self.index}: no answer to {method!r} within {timeout_s:g} s") from None
        except self._ray.exceptions.RayActorError as exc:
            self._lost = f"the Ray actor died ({type(exc).__name__})"
            raise WorkerLost(f"worker {self.index}: {self._lost}") from None
        except self._ray.exceptions.RayTaskError as exc:
            raise WorkerLost(f"worker {self.index}: {exc}") from None
        return unpack(data)

    async def shutdown(self) -> None:
        if self._lost is None:
            with contextlib.suppress(WorkerLost):
                await self.call("close", [], timeout_s=15)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.actor.shutdown.remote(), 30)
        with contextlib.suppress(Exception):
            self._ray.kill(self.actor)


async def start_ray_workers(n: int, address: str, *, num_cpus: float = 1.0) -> list[RayWorker]:
    """Create ``n`` worker actors (each reserving ``num_cpus`` CPUs; Ray spreads them over the cluster)."""
    ray = connect_ray(address)  # already connected by run_bench_distributed, in the main thread
    actor_cls = ray.remote(num_cpus=num_cpus, max_restarts=0, max_concurrency=4, scheduling_strategy="SPREAD")(
        RayWorkerActor
    )
    return [RayWorker(ray, actor_cls, i) for i in range(n)]
