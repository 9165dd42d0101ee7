"""The engine's public contract, used by ``sim/`` (virtual time) and ``serve/`` (wall clock).

A :class:`ReplicaEngine` is a pure state machine: callers add requests and ask it to run one scheduler step at a
given time; it answers how long the step takes and which tokens it produced. It never sleeps and never reads a clock.
``serve`` sleeps for ``duration_ns`` then releases the tokens; ``sim`` advances virtual time by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A request as the engine sees it.

    Attributes:
        id: caller's id (unique among live requests).
        prompt_tokens: prompt length in tokens.
        max_tokens: output tokens to generate (``ignore_eos`` semantics: exactly this many).
        arrival_ns: when the request reached the engine (its queue time starts here).
        block_hashes: hashes of the prompt's full KV blocks (block size tokens each), chained so that equal
            hashes mean equal prefixes; used by the prefix cache. Empty = no reuse possible.
    """

    id: int
    prompt_tokens: int
    max_tokens: int
    arrival_ns: int = 0
    block_hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StepResult:
    """Outcome of one scheduler step that starts at ``start_ns`` and takes ``duration_ns``.

    Attributes:
        emitted: (request id, tokens produced in this step) for every request that produced output tokens; a
            request's first entry is its first token. Tokens become visible at ``start_ns + duration_ns``.
        finished: ids of requests that completed in this step (all their tokens are in ``emitted``).
        preempted: ids of requests preempted (recompute) in this step.
        prefill_tokens / decode_tokens: work done, for metrics.
    """

    start_ns: int
    duration_ns: int
    emitted: tuple[tuple[int, int], ...] = ()
    finished: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()
    prefill_tokens: int = 0
    decode_tokens: int = 0


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Gauges and counters as vLLM exposes them on /metrics."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # 0..1 of KV blocks in use
    kv_blocks_total: int = 0
    prefix_queries_tokens: int = 0  # cumulative prompt tokens looked up in the prefix cache
    prefix_hits_tokens: int = 0  # cumulative prompt tokens found there
    preemptions: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class ReplicaEngine(Protocol):
    """One model replica (continuous batching scheduler + step-time model)."""

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request (FCFS). Raises ``ValueError`` if its prompt can never fit the KV cache."""
        ...

    def abort(self, request_id: int) -> None:
        """Drop a request (client went away); frees its KV blocks."""
        ...

    def has_work(self) -> bool:
        """True while any request is waiting or running."""
        ...

    def step(self, now_ns: int) -> StepResult | None:
        """Schedule and run one step starting at ``now_ns``; ``None`` when there is nothing to do."""
        ...

    def stats(self) -> EngineStats:
        """Current gauges and cumulative counters."""
        ...
