"""The load generator's own cost: :func:`client_cost` — CPU per streamed token event of the client's hot path on this
machine, measured in process (no network, no server), as ``--workers auto`` measures it to size a run — and which
hot loop runs it: :func:`hot_loop`, :func:`using_hot_loop` (docs/metrics.md, "The compiled hot loop")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from tailscope.api._support import public
from tailscope.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ClientCost:
    """What one token event costs the client, in process.

    Attributes:
        us_per_event: CPU µs per token event (the best pass; process time, so other work on the machine barely
            counts).
        events_per_pass: token events in one pass (``streams`` × (``tokens`` + 2): the role chunk and the final usage
            chunk are events too).
        passes: passes measured (the best counts, as timeit reports).
        usage: whether each chunk carried usage (vLLM's continuous usage), as a bench asks by default.
        hot_loop: ``compiled`` or ``python``: the loop measured.
    """

    us_per_event: float
    events_per_pass: int
    passes: int
    usage: bool
    hot_loop: str = "python"


@public
def hot_loop() -> str:
    """``compiled`` when this install runs the client's compiled hot loop (built from ``client/_hot.c`` at install
    where a C compiler was present), else ``python`` (its pure-Python twin: same records, more CPU per event)."""
    from tailscope.client.hot import hot_loop as which

    return which()


@contextlib.contextmanager
def using_hot_loop(kind: str) -> Iterator[None]:
    """Run the body of a ``with`` block on the ``compiled`` or the ``python`` hot loop — to compare them side by side
    in one process (``benchmarks/client_overhead.py --hot-loop``). Not for concurrent use: it rebinds the client's
    module-level functions for the block; worker processes (``workers=``) follow ``TAILSCOPE_HOT_LOOP`` instead.

    Raises:
        ConfigError: ``kind`` is neither, or ``compiled`` where it is not built (the reason is named).
    """
    from tailscope.client.hot import forced

    try:
        cm = forced(kind)
        cm.__enter__()
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"hot loop {kind!r}: {exc}") from exc
    try:
        yield
    finally:
        cm.__exit__(None, None, None)


@public
def client_cost(
    *, streams: int = 20, tokens: int = 256, usage: bool = True, repeat: int = 3, hot: str | None = None
) -> ClientCost:
    """Measure the CPU the client spends per streamed token event on this machine.

    A recorded vLLM-style stream (chunked transfer encoding, one SSE event per network read) is fed through the raw
    transport's protocol and the OpenAI client's consume path — exactly what runs per network read in a bench — with
    no socket and no server. The event loop, socket reads and record keeping add about 2.5× around it in a real run
    (``benchmarks/client_overhead.py`` measures the whole process).

    Args:
        streams: streams per pass; tokens: output tokens per stream; usage: per-chunk usage (vLLM continuous usage);
        repeat: passes (the fastest counts); hot: ``compiled`` or ``python`` to measure that hot loop (default:
        the one in use, :func:`hot_loop`).

    Raises:
        ConfigError: a count below 1; a hot loop that is not built here.
    """
    for name, value in (("streams", streams), ("tokens", tokens), ("repeat", repeat)):
        if value < 1:
            raise ConfigError(f"{name} must be ≥ 1 (got {value})")
    from tailscope.client.cost import hot_path_us

    with using_hot_loop(hot) if hot is not None else contextlib.nullcontext():
        us = hot_path_us(streams=streams, tokens=tokens, usage=usage, repeat=repeat)
        which = hot_loop()
    return ClientCost(
        us_per_event=us, events_per_pass=streams * (tokens + 2), passes=repeat, usage=usage, hot_loop=which
    )
