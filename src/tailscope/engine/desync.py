"""The desynchronising noise of a real closed loop: the client's delay between a response's end and its next request.

A simulated closed loop of ``C`` clients sending requests of one prompt and one output length is deterministic: the
requests prefilled in consecutive steps decode together and finish within a few (short, decode-only) steps of each
other, so they come back together, and a long prefill step collects every arrival that lands during it — the loop
coalesces into waves of simultaneous prefills. A real client does not send its next request the instant the last
token of the previous one is on the wire: the benchmark client (an asyncio process serving all ``C`` streams on one
event loop) parses the last SSE event, records the request and sends the next one over its keep-alive connection,
waiting behind the other streams' events. :class:`Desync` adds that delay to each closed-loop client's gap, seeded
per request: exponential, of mean ``client_ms + client_us_per_stream × C``. The defaults (0.5 ms + 20 µs per
stream: 1.8 ms at 64 clients, 5.6 ms at 256) are what this project measured of asyncio clients on loopback — a
median send lag of 0.5–1 ms (docs/engine.md, "Client send lag"), and a raw uvloop client's TTFT error p99 of about
1 ms at 16–64 streams and 9 ms at 256 (docs/scale-out.md, ``benchmarks/client_overhead.py``).

What else desynchronises a real loop is already in the model or does not apply: the API server's work (HTTP, chat
template, tokenisation) is the learned front end, spread uniformly over ``[0, 2 × frontend_ms]`` per request
(:func:`tailscope.engine.perf.frontend_jitter`); step-time variation moves every request of a replica together (it
desynchronises replicas, not the requests of one); and the corpus implies no output-length variation (every row is
a fixed-length run, its TPOT an average over exactly ``osl`` tokens).

How much this buys is measured in docs/engine.md ("Closed loops and desynchronising noise"): a little. The waves are
driven by the step physics — a prefill step of a full token budget lasts 10–20 decode steps and collects the
arrivals of its duration — and a client delay of a few ms does not dissolve them; delays of seconds would. The
measured loops stay partly synchronised too (the learned ``burst`` share).

Deterministic: the delays are a stream of draws seeded by the run's seed (its first request's), taken in the
simulation's own deterministic order, so a seeded run replays exactly. :data:`OFF` switches it off (tests that
count exact steps; ``SimArgs(desync=False)``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT", "OFF", "Desync"]

_SALT = 0x5DE5_7C00


@dataclass(frozen=True, slots=True)
class Desync:
    """Per-request delay of a closed-loop client between a response's end and its next request (see the module).

    Attributes:
        client_ms: the mean delay of a client with few streams, ms.
        client_us_per_stream: what each concurrent stream of the client adds to the mean, µs.
    """

    client_ms: float = 0.5
    client_us_per_stream: float = 20.0

    @property
    def enabled(self) -> bool:
        return self.client_ms > 0 or self.client_us_per_stream > 0

    def mean_ns(self, clients: int) -> float:
        """The mean delay with ``clients`` concurrent streams, ns."""
        return self.client_ms * 1e6 + self.client_us_per_stream * 1e3 * clients

    def sampler(self, clients: int, seed: int) -> Callable[[], int]:
        """The delays of a closed loop of ``clients`` streams, ns, one per call: a stream of exponential draws
        seeded by ``seed`` (the simulator passes the run's first request's seed, so a seeded run replays)."""
        mean = self.mean_ns(clients)
        if mean <= 0:
            return lambda: 0
        draw = random.Random(seed ^ _SALT).expovariate
        rate = 1.0 / mean

        def gap() -> int:
            return int(draw(rate))

        return gap


#: the noise ``sim`` (and ``plan``'s simulations) run closed loops with
DEFAULT = Desync()
#: no noise: every closed-loop client sends its next request the moment its previous one ends
OFF = Desync(client_ms=0.0, client_us_per_stream=0.0)
