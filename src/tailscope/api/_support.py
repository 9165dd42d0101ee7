"""What every public function shares: sync twins of async functions, one exception tree, optional stores.

* :func:`run_sync` runs a coroutine on uvloop when it is installed (lower client overhead), else on asyncio's loop.
* :func:`sync_twin` makes the blocking twin of an ``async def`` with the same signature.
* :func:`public` converts any exception that is not a :class:`~tailscope.errors.TailscopeError` into an
  :class:`~tailscope.errors.InternalError` (``raise … from exc``: the cause and its traceback are kept).
* :func:`open_store` turns the ``store=`` argument into a :class:`~tailscope.store.runs.RunStore` or None: the API
  writes a store only when it was given one.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar, cast

from tailscope.errors import InternalError, TailscopeError

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

#: a file path the API accepts: a ``str`` or any ``os.PathLike``
PathLike = str | os.PathLike[str]
#: a path that ``store=`` accepts (besides a RunStore object, or None: write nothing)
StorePath = PathLike


def optional_path(value: PathLike | None) -> Path | None:
    """``value`` as a :class:`~pathlib.Path`, or None when it is None (an option not given)."""
    return Path(value) if value is not None else None


def run_sync(coro: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine to completion on uvloop when installed, else on asyncio's default loop.

    Raises:
        ConfigError-like TailscopeError: when called from inside a running event loop (use the ``*_async`` twin).
    """
    import asyncio  # not at module level: the synchronous API (simulate, plans) never loads it

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise TailscopeError("called from a running event loop: await the *_async twin of this function instead")
    # The main task returns nothing: on Python 3.11 the Runner's SIGINT bookkeeping at exit formats the main task's
    # repr (signal.getsignal → enum lookup → ValueError message), and a task's repr includes its result's — a bench
    # result's full repr (every record, every token time) cost ~80 ms of CPU at 256 streams.
    box: list[R] = []

    async def main() -> None:
        box.append(await coro)

    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
        return box[0]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    return box[0]


def _convert(exc: Exception, what: str) -> TailscopeError:
    if isinstance(exc, TailscopeError):
        return exc
    return InternalError(f"{what} failed: {type(exc).__name__}: {exc} (run with --debug for the traceback)")


def public(fn: F) -> F:
    """Decorate a public function (sync or async) so that it raises only TailscopeError subclasses."""
    what = fn.__name__
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except TailscopeError:
                raise
            except Exception as exc:
                raise _convert(exc, what) from exc

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TailscopeError:
            raise
        except Exception as exc:
            raise _convert(exc, what) from exc

    return cast(F, wrapper)


def sync_twin(fn: Callable[P, Coroutine[Any, Any, R]], doc: str | None = None) -> Callable[P, R]:
    """The blocking twin of ``async def fn``: same parameters, runs it with :func:`run_sync`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return run_sync(fn(*args, **kwargs))

    name = fn.__name__.removesuffix("_async")
    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = doc or (
        f"Blocking twin of :func:`{fn.__name__}` (same parameters and result); do not call it from a running "
        f"event loop.\n\n{fn.__doc__ or ''}"
    )
    return wrapper


def open_store(store: StorePath | RunStore | None) -> RunStore | None:
    """The run store for ``store=``: a RunStore as given, one opened at a path, or None (nothing is written)."""
    if store is None:
        return None
    from tailscope.store.runs import RunStore

    if isinstance(store, RunStore):
        return store
    return RunStore(store)


def default_store() -> RunStore:
    """The store the command line uses: ``$TAILSCOPE_DB``, else ``./.tailscope/tailscope.duckdb``."""
    from tailscope.store.runs import RunStore

    return RunStore(None)


class Listener:
    """What a started server shares: ``async with`` starts it (:meth:`start`) and stops it on exit (:meth:`stop`)."""

    async def start(self) -> str:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


async def serve_until_stopped(
    server: Any,
    *,
    duration: float | None,
    handle_signals: bool,
    on_ready: Callable[[Any], None] | None = None,
) -> None:
    """Run ``server`` (an async context manager that listens while entered) until ``duration`` seconds pass or, with
    ``handle_signals``, SIGINT/SIGTERM arrives; ``on_ready`` is called once it listens."""
    import asyncio
    import contextlib

    from tailscope.signals import stop_on_signals

    stop = asyncio.Event()
    async with server:
        with stop_on_signals(stop, enabled=handle_signals):
            if on_ready is not None:
                on_ready(server)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=duration if duration and duration > 0 else None)
