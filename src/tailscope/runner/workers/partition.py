"""Splitting one run's schedule across load-generator workers (pure: no sockets, no clocks).

The driver builds the whole request stream and hands each worker a share, so that the *aggregate* load is exactly the
one requested:

* open loop — every request keeps its absolute target time ``at_ns``; the groups (a single request, or a whole
  multi-turn session) are dealt to workers in stream order, each to the worker with the fewest requests so far. The
  union of the shares is the original stream, and each share is in schedule order.
* closed loop — the concurrency is split as evenly as possible (``split_concurrency``) and a :class:`Feeder` hands out
  whole groups on demand, so the global pull order matches a single process and a faster worker simply pulls more.

A session never spans two workers: its later turns depend on the previous response, which only one worker sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tailscope.errors import ConfigError
from tailscope.workload.spec import RequestSpec

#: refuse to materialize open-loop schedules larger than this (memory on the driver).
MAX_SCHEDULED_REQUESTS = 20_000_000


def group_sessions(specs: Iterable[RequestSpec]) -> Iterator[list[RequestSpec]]:
    """Group a request stream into dispatch units.

    A unit is one request, or a session's turn 0 followed by its later turns (they follow it directly in the
    stream, as the load generator expects).
    """
    group: list[RequestSpec] = []
    for spec in specs:
        if group and spec.session_id is not None and spec.session_id == group[0].session_id and (spec.turn or 0) > 0:
            group.append(spec)
            continue
        if group:
            yield group
        group = [spec]
    if group:
        yield group


def partition_open(specs: Iterable[RequestSpec], workers: int) -> list[list[RequestSpec]]:
    """Deal an open-loop stream to ``workers`` shares (sessions kept whole, each share in schedule order).

    Each group goes to the worker with the fewest requests so far (ties → lowest index), which for single-request
    groups is plain round-robin: every worker gets ``1/workers`` of the arrival process.

    Raises:
        ConfigError: ``workers < 1``, a request without ``at_ns`` that is not a later session turn, or a schedule
            larger than :data:`MAX_SCHEDULED_REQUESTS`.
    """
    if workers < 1:
        raise ConfigError(f"--workers must be ≥ 1 (got {workers})")
    shares: list[list[RequestSpec]] = [[] for _ in range(workers)]
    total = 0
    for group in group_sessions(specs):
        if group[0].at_ns is None:
            raise ConfigError(f"request {group[0].id} has no target time: an open-loop schedule needs at_ns")
        i = min(range(workers), key=lambda k: (len(shares[k]), k))
        shares[i].extend(group)
        total += len(group)
        if total > MAX_SCHEDULED_REQUESTS:
            raise ConfigError(
                f"the schedule has more than {MAX_SCHEDULED_REQUESTS:,} requests; lower --rate or --duration"
            )
    return shares


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """Closed-loop slots per worker: as even as possible, larger shares first; sums to ``concurrency``.

    Raises:
        ConfigError: fewer slots than workers (a worker with no slot would send nothing).
    """
    if workers < 1:
        raise ConfigError(f"--workers must be ≥ 1 (got {workers})")
    if concurrency < workers:
        raise ConfigError(
            f"--workers {workers} exceeds --concurrency {concurrency}: each worker needs at least one slot"
        )
    base, extra = divmod(concurrency, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]


@dataclass(slots=True)
class Feeder:
    """Hands out a (possibly endless) closed-loop stream in whole groups, remembering who got what.

    Attributes:
        owner: request id → worker index, for every request handed out.
        exhausted: True once the stream has ended.
    """

    specs: Iterator[RequestSpec]
    owner: dict[int, int] = field(default_factory=dict)
    exhausted: bool = False
    _groups: Iterator[list[RequestSpec]] | None = None

    def take(self, worker: int, max_requests: int) -> list[RequestSpec]:
        """Up to ``max_requests`` requests in whole groups (at least one group while the stream lasts)."""
        if self._groups is None:
            self._groups = group_sessions(self.specs)
        out: list[RequestSpec] = []
        while not self.exhausted and (not out or len(out) < max_requests):
            group = next(self._groups, None)
            if group is None:
                self.exhausted = True
                break
            out.extend(group)
        for s in out:
            self.owner[s.id] = worker
        return out

    def handed_to(self, worker: int) -> int:
        """How many requests ``worker`` was given."""
        return sum(1 for w in self.owner.values() if w == worker)
