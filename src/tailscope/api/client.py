"""The load generator's own cost: :func:`client_cost` — CPU per streamed token event of the client's hot path on this
machine, measured in process (no network, no server), as ``--workers auto`` measures it to size a run."""

from __future__ import annotations

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
    """

    us_per_event: float
    events_per_pass: int
    passes: int
    usage: bool


@public
def client_cost(*, streams: int = 20, tokens: int = 256, usage: bool = True, repeat: int = 3) -> ClientCost:
    """Measure the CPU the client spends per streamed token event on this machine.

    A recorded vLLM-style stream (chunked transfer encoding, one SSE event per network read) is fed through the raw
    transport's protocol and the OpenAI client's consume path — exactly what runs per network read in a bench — with
    no socket and no server. The event loop, socket reads and record keeping add about 2.5× around it in a real run
    (``benchmarks/client_overhead.py`` measures the whole process).

    Args:
        streams: streams per pass; tokens: output tokens per stream; usage: per-chunk usage (vLLM continuous usage);
        repeat: passes (the fastest counts).

    Raises:
        ConfigError: a count below 1.
    """
    for name, value in (("streams", streams), ("tokens", tokens), ("repeat", repeat)):
        if value < 1:
            raise ConfigError(f"{name} must be ≥ 1 (got {value})")
    from tailscope.client.cost import hot_path_us

    us = hot_path_us(streams=streams, tokens=tokens, usage=usage, repeat=repeat)
    return ClientCost(us_per_event=us, events_per_pass=streams * (tokens + 2), passes=repeat, usage=usage)
