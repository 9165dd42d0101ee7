"""The API-server latency a request meets before the engine sees it, modelled exactly as ``tailscope sim`` does.

In vLLM the HTTP server renders the chat template and tokenizes one request at a time, then hands the request to the
engine; a busy server adds latency per request in flight. The engine's step-time model prices these
(``tokenize_ns``, ``frontend_delay_ns``, and the trained model's ``engine_wait_ns``: the engine's scheduler taking
requests in at its own cadence, and holding context requests for its attention-DP ranks); ``sim`` delays each
request's arrival at the replica by them, and ``serve`` waits the same time (scaled by ``--speed``) before submitting
to the engine, so both predict the same TTFT. ``sim`` also charges its own closed-loop clients the trained model's
learned synchrony (``arrival_burst_ns``: how the corpus' fixed-length loops sent); a server cannot tell what its
client is, and a real client's synchrony reaches it by itself.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tailscope.engine.perf import frontend_jitter


@runtime_checkable
class FrontendModel(Protocol):
    """Prices of the API server (the engine's ``StepTimeModel`` provides them)."""

    def tokenize_ns(self, prompt_tokens: int) -> int:
        """Serialized per-request work (tokenization), ns."""
        ...

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        """Latency requests do not queue for: fixed part (spread by ``u`` in [0, 1)) + per request in flight, ns."""
        ...


class Frontend:
    """The frontend queue of one replica on the engine clock.

    Args:
        model: the prices; ``None`` = no frontend latency (requests reach the engine at once).
        seed: seed of the per-request jitter ``u``.
    """

    def __init__(self, model: FrontendModel | None, seed: int = 0) -> None:
        self.model = model
        self.seed = seed
        self.pending = 0  # requests inside the frontend right now
        self._free_ns = 0

    def delay_ns(self, now_ns: int, prompt_tokens: int, in_flight: int, key: int) -> int:
        """Engine ns from ``now_ns`` until a request with ``prompt_tokens`` reaches the engine.

        Args:
            now_ns: current engine time.
            prompt_tokens: the request's prompt length.
            in_flight: requests on the replica counting this one (in the frontend or in the engine).
            key: the request's sequence number (its jitter is a hash of it and the seed, as in ``sim``).
        """
        if self.model is None:
            return 0
        start = max(now_ns, self._free_ns)
        done = start + self.model.tokenize_ns(prompt_tokens)
        self._free_ns = done
        delay = done - now_ns + self.model.frontend_delay_ns(in_flight, frontend_jitter(self.seed, key))
        # the engine takes requests in at its own cadence and may hold them to balance its attention-DP ranks, as in
        # sim; the trained model's closed-loop synchrony (``arrival_burst_ns``) is how the corpus' clients sent, not
        # the server's: a real client's synchrony reaches this server by itself
        wait = getattr(self.model, "engine_wait_ns", None)
        return delay + wait(in_flight, prompt_tokens) if wait is not None else delay
