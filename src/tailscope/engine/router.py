"""Routers: which replica gets the next request.

* ``round_robin`` — cycle over the ready replicas.
* ``least_outstanding`` — the replica with the fewest requests in flight (running + waiting); ties → lowest index.
* ``prefix_affinity`` — requests with the same prefix key go to the same replica (rendezvous hashing, so adding or
  removing a replica moves only its share of keys), which keeps their prefix-cache hits; requests without a key,
  or whose home replica has more than ``overload_factor`` × the mean outstanding, fall back to least outstanding.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailscope.engine.kv_cache import chain_hash
from tailscope.errors import ConfigError

ROUTERS = ("round_robin", "least_outstanding", "prefix_affinity")


class Router:
    """Chooses among replica indices given their outstanding counts (pure, deterministic)."""

    def __init__(self, policy: str = "least_outstanding", *, overload_factor: float = 2.0) -> None:
        if policy not in ROUTERS:
            raise ConfigError(f"router {policy!r}: use one of {', '.join(ROUTERS)}")
        self.policy = policy
        self.overload_factor = overload_factor
        self._rr = 0

    def choose(self, ready: Sequence[int], outstanding: Sequence[int], prefix_key: int | None = None) -> int:
        """Pick one of ``ready`` (replica indices); ``outstanding[i]`` is replica i's requests in flight."""
        if not ready:
            raise ValueError("no ready replica")
        if self.policy == "round_robin":
            idx = ready[self._rr % len(ready)]
            self._rr += 1
            return idx
        least = min(ready, key=lambda i: (outstanding[i], i))
        if self.policy == "least_outstanding" or prefix_key is None:
            return least
        home = max(ready, key=lambda i: chain_hash(prefix_key, i))
        mean = sum(outstanding[i] for i in ready) / len(ready)
        if outstanding[home] > self.overload_factor * mean + 1:
            return least
        return home
