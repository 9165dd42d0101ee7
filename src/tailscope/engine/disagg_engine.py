"""A disaggregated deployment as one :class:`~tailscope.engine.api.ReplicaEngine`: what ``tailscope serve --disagg``
drives on the wall clock.

The pools are those of ``tailscope sim --disagg`` (:class:`~tailscope.engine.cluster.ClusterSpec`: one replica per
attention-DP rank of each pool's workers) and a request lives as it does there (``sim/disagg.py``): the rank of the
prefill pool with the fewest requests runs its prompt and samples one token; its KV crosses to the decode pool
(:class:`~tailscope.engine.disagg.KvTransfer`), and the decode worker's scheduler takes it in
(``pickup_wait_ns`` at that pool's load) on the decode rank with the fewest requests, which computes the last prompt
token and samples the first output token the client sees. The prefill pool's own token never reaches the client.

The ranks run side by side, each on its own timeline; one :meth:`DisaggregatedEngine.step` runs from the caller's
``now`` to the next moment anything becomes visible or due — the end of a rank's step or a KV arrival — and reports
the decode ranks' tokens of the steps that end then. A rank that was idle when work reached it starts at that
moment (a request's arrival, its KV's arrival), not at the caller's next step: the caller (the serve loop) only
calls between steps, so a new request would otherwise wait for another rank's step to end. Clock-free, like every
engine: the caller owns the time.

:class:`DataParallelEngine` is the same rank machinery for one aggregated replica's attention-DP ranks (``serve
--attention-dp N``, as ``sim`` runs them: one replica per rank): a request runs whole — prefill and decode — on the
rank with the fewest requests.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tailscope.engine.api import EngineRequest, EngineStats, StepResult
from tailscope.engine.disagg import KvTransfer
from tailscope.engine.perf import StepModel
from tailscope.engine.replica import Replica

if TYPE_CHECKING:
    from tailscope.engine.cluster import ClusterSpec

__all__ = ["DataParallelEngine", "DisaggregatedEngine", "PrefillFrontend", "RanksFrontend"]


@dataclass(frozen=True, slots=True)
class PrefillFrontend:
    """The API-server prices of a disaggregated deployment: its prefill ranks', whose engine wait is a prefill pool's
    (as ``sim`` charges it)."""

    perf: StepModel

    @property
    def weights_dtype(self) -> str:
        return self.perf.weights_dtype

    def tokenize_ns(self, prompt_tokens: int) -> int:
        return self.perf.tokenize_ns(prompt_tokens)

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        return self.perf.frontend_delay_ns(in_flight, u)

    def engine_wait_ns(self, in_flight: int, prompt_tokens: int) -> int:
        wait = getattr(self.perf, "engine_wait_ns", None)
        return 0 if wait is None else int(wait(in_flight, prompt_tokens, prefill_pool=True))


@dataclass(frozen=True, slots=True)
class RanksFrontend:
    """The API-server prices of one replica's attention-DP ranks. ``sim`` gives each rank an API server of its own
    (one replica slot per rank, behind the router), so a request meets the delays of its rank's share of the requests
    in flight: the in-flight count is divided among the ranks (the router keeps them even)."""

    perf: StepModel
    ranks: int

    @property
    def weights_dtype(self) -> str:
        return self.perf.weights_dtype

    def _share(self, in_flight: int) -> int:
        return max(1, -(-in_flight // self.ranks))

    def tokenize_ns(self, prompt_tokens: int) -> int:
        return self.perf.tokenize_ns(prompt_tokens) // self.ranks  # the ranks' servers tokenize side by side

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        return self.perf.frontend_delay_ns(self._share(in_flight), u)

    def engine_wait_ns(self, in_flight: int, prompt_tokens: int) -> int:
        wait = getattr(self.perf, "engine_wait_ns", None)
        return 0 if wait is None else int(wait(self._share(in_flight), prompt_tokens))


@dataclass(slots=True)
class _Rank:
    replica: Replica
    decode: bool
    outstanding: int = 0  # requests assigned here and not yet finished (prefill: not yet handed off)
    free_at: int = 0  # engine time its last step ended
    ready_at: int | None = None  # the earliest arrival of work that reached it while idle
    step: StepResult | None = None  # the step in progress


@dataclass(slots=True)
class _Request:
    prompt: int
    max_tokens: int
    hashes: tuple[int, ...]
    rank: int  # where it is now; -1 while its KV is on the way
    arrival: int = 0


@dataclass(slots=True)
class DisaggregatedEngine:
    """Prefill ranks, decode ranks and the KV transfer between them, behind the ReplicaEngine protocol.

    Args:
        prefill / decode: one replica per attention-DP rank of each pool (:meth:`from_cluster` builds them).
        transfer: the KV transfer of a prompt from a prefill to a decode worker.
        pickup: the decode worker's scheduler taking a request in (``(requests in flight, prompt tokens) → ns``), or
            None.
    """

    prefill: list[Replica]
    decode: list[Replica]
    transfer: KvTransfer | None = None
    pickup: Callable[[int, int], int] | None = None
    #: called ``(request id, tokens found in the prefix cache, engine ns its step starts)`` when a prefill rank first
    #: schedules a request (the rank's own step start: an idle rank starts when the request reaches it)
    on_admit: Callable[[int, int, int], None] | None = None
    #: with :meth:`watch_phases`: called per prefill chunk with the rank step that runs it, ``(request id, tokens,
    #: tokens computed before, step start ns, step end ns, the step's prefill tokens, its decoding sequences,
    #: the pool that ran it: ``prefill``, ``decode`` or ``""`` for an aggregated rank)`` — the decode rank computes a
    #: transferred prompt's last token as a one-token chunk
    on_chunk_at: Callable[[int, int, int, int, int, int, int, str], None] | None = None
    #: with :meth:`watch_phases`: called ``(request id, engine ns the KV leaves, ns it is there)`` at each hand-off
    on_transfer: Callable[[int, int, int], None] | None = None
    _ranks: list[_Rank] = field(default_factory=list)
    _requests: dict[int, _Request] = field(default_factory=dict)
    _arrivals: list[tuple[int, int]] = field(default_factory=list)  # (engine ns the KV is there, request id)
    _last_now: int = 0
    _step_start: int = 0  # the start of the rank step being run (admissions and chunks are stamped with it)
    _chunks: list[tuple[int, int, int]] = field(default_factory=list)  # that step's chunks, until its end is known
    transfers: int = 0
    transfer_ns: int = 0

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode or self.transfer is None:
            raise ValueError("a disaggregated engine needs at least one prefill and one decode rank, and a KV transfer")
        self._ranks = [_Rank(r, False) for r in self.prefill] + [_Rank(r, True) for r in self.decode]
        for r in self.prefill:
            r.on_admit = self._admitted

    def watch_phases(
        self,
        on_chunk_at: Callable[[int, int, int, int, int, int, int, str], None],
        on_transfer: Callable[[int, int, int], None],
    ) -> None:
        """Report every rank's prefill chunks with their rank step's times, and every KV transfer (what ``serve``'s
        per-phase spans need: the ranks run on their own timelines, so the composite step's times are not theirs).
        Off by default: a check per chunk, nothing more."""
        self.on_chunk_at, self.on_transfer = on_chunk_at, on_transfer
        for rank in self._ranks:
            rank.replica.on_chunk = self._chunk

    @classmethod
    def from_cluster(cls, cluster: ClusterSpec) -> DisaggregatedEngine:
        """The pools of a :class:`~tailscope.engine.cluster.ClusterSpec` with ``disagg`` set."""
        if cluster.disagg is None:
            raise ValueError("the cluster has no --disagg pools")
        pre, dec = cluster.perf("prefill"), cluster.perf("decode")
        return cls(
            [cluster.new_replica(pre) for _ in range(cluster.ranks("prefill"))],
            [cluster.new_replica(dec) for _ in range(cluster.ranks("decode"))],
            cluster.kv_transfer(),
            getattr(dec, "pickup_wait_ns", None),
        )

    # ---- what the HTTP layer reads -------------------------------------------------------------------------------
    @property
    def perf(self) -> PrefillFrontend | RanksFrontend:
        """The API server's prices (a request meets the prefill pool's front end first)."""
        return PrefillFrontend(self.prefill[0].perf)

    @property
    def capacity_tokens(self) -> int:
        """The longest request (prompt + output) a decode rank holds: what the server can accept."""
        return min(r.capacity_tokens for r in self.decode)

    # ---- the protocol ----------------------------------------------------------------------------------------------
    def add_request(self, request: EngineRequest) -> None:
        """Queue ``request`` on the prefill rank with the fewest requests. Raises ValueError when prompt + output can
        never fit a decode rank's KV cache."""
        self._enqueue(request, whole=False)

    def abort(self, request_id: int) -> None:
        """Drop a request wherever it is (a prefill rank, on its way, a decode rank); no-op for unknown ids."""
        req = self._requests.pop(request_id, None)
        if req is None:
            return
        if req.rank >= 0:
            rank = self._ranks[req.rank]
            rank.replica.abort(request_id)
            rank.outstanding -= 1
        # a transfer in flight is dropped when it arrives (its id is gone)

    def has_work(self) -> bool:
        return bool(self._arrivals) or any(r.step is not None or r.replica.has_work() for r in self._ranks)

    def step(self, now_ns: int) -> StepResult | None:
        """Run every rank until the next moment a decode token is released or a KV transfer arrives (see the module
        docstring); ``None`` when nothing runs and nothing is on its way."""
        now = max(now_ns, self._last_now)
        self._last_now = now
        self._deliver(now)
        for rank in self._ranks:
            if rank.step is None and rank.replica.has_work():
                start = max(rank.free_at, rank.ready_at if rank.ready_at is not None else now)
                self._step_start = start
                res = rank.replica.step(start)
                rank.ready_at = None
                if res is not None:
                    rank.step = res
                    rank.free_at = res.start_ns + res.duration_ns
                if self._chunks:
                    self._stamp(res, self._pool(rank))
        ends = [r.free_at for r in self._ranks if r.step is not None]
        if self._arrivals:
            ends.append(self._arrivals[0][0])
        if not ends:
            return None
        end = max(min(ends), now + 1)
        emitted: list[tuple[int, int]] = []
        finished: list[int] = []
        preempted: list[int] = []
        prefill_tokens = decode_tokens = 0
        for i, rank in enumerate(self._ranks):
            res = rank.step
            if res is None or rank.free_at > end:
                continue
            rank.step = None
            prefill_tokens += res.prefill_tokens
            decode_tokens += res.decode_tokens
            if rank.decode:
                emitted.extend(res.emitted)
                finished.extend(res.finished)
                preempted.extend(res.preempted)
                for rid in res.finished:
                    self._requests.pop(rid, None)
                rank.outstanding -= len(res.finished)
            else:
                for rid in res.finished:
                    self._hand_off(i, rid, rank.free_at)
        return StepResult(
            start_ns=now,
            duration_ns=end - now,
            emitted=tuple(emitted),
            finished=tuple(finished),
            preempted=tuple(preempted),
            prefill_tokens=prefill_tokens,
            decode_tokens=decode_tokens,
        )

    def stats(self) -> EngineStats:
        """The pools' gauges and counters summed (KV usage: of all their blocks; prompt tokens: the prefill pool's,
        generation tokens: the decode pool's — an aggregated rank's both)."""
        parts = [r.replica.stats() for r in self._ranks]
        total = sum(p.kv_blocks_total for p in parts)
        extra: dict[str, float] = {}
        for p in parts:
            for k, v in p.extra.items():
                extra[k] = extra.get(k, 0.0) + v
        if self.prefill:
            extra["kv_transfers"] = float(self.transfers)
            extra["kv_transfer_s"] = self.transfer_ns / 1e9
            extra["kv_transfers_in_flight"] = float(len(self._arrivals))
        prompt_parts = parts[: len(self.prefill)] or parts  # an aggregated rank's prompts are its own
        return EngineStats(
            running=sum(p.running for p in parts),
            waiting=sum(p.waiting for p in parts) + len(self._arrivals),
            kv_usage=sum(p.kv_usage * p.kv_blocks_total for p in parts) / total if total else 0.0,
            kv_blocks_total=total,
            prefix_queries_tokens=sum(p.prefix_queries_tokens for p in parts),
            prefix_hits_tokens=sum(p.prefix_hits_tokens for p in parts),
            preemptions=sum(p.preemptions for p in parts),
            prompt_tokens_total=sum(p.prompt_tokens_total for p in prompt_parts),
            generation_tokens_total=sum(p.generation_tokens_total for p in parts[len(self.prefill) :]),
            extra=extra,
        )

    # ---- inside -------------------------------------------------------------------------------------------------
    def _enqueue(self, request: EngineRequest, *, whole: bool) -> None:
        """Queue ``request`` on the rank with the fewest requests: a prefill rank runs its prompt and samples one
        token (``whole=False``); an aggregated rank (the ranks in ``decode``) runs all of it."""
        if request.prompt_tokens + request.max_tokens > self.capacity_tokens:
            raise ValueError(
                f"request {request.id}: {request.prompt_tokens}+{request.max_tokens} tokens exceed a decode rank's KV "
                f"cache ({self.capacity_tokens} tokens)"
            )
        if request.id in self._requests:
            raise ValueError(f"request {request.id} is already queued")
        i = self._least(whole)
        rank = self._ranks[i]
        out = request.max_tokens if whole else 1
        rank.replica.add(request.id, request.prompt_tokens, out, request.arrival_ns, request.block_hashes)
        self._requests[request.id] = _Request(
            request.prompt_tokens, request.max_tokens, request.block_hashes, i, request.arrival_ns
        )
        rank.outstanding += 1
        self._woken(rank, request.arrival_ns)

    def _pool(self, rank: _Rank) -> str:
        return "decode" if rank.decode else "prefill"

    def _least(self, decode: bool) -> int:
        """The rank of a pool with the fewest requests (the lowest index among equals)."""
        best = -1
        for i, r in enumerate(self._ranks):
            if r.decode == decode and (best < 0 or r.outstanding < self._ranks[best].outstanding):
                best = i
        return best

    def _woken(self, rank: _Rank, at: int) -> None:
        if rank.step is None and (rank.ready_at is None or at < rank.ready_at):
            rank.ready_at = at

    def _admitted(self, rid: int, hit_tokens: int = 0) -> None:
        if self.on_admit is not None:
            self.on_admit(rid, hit_tokens, self._step_start)

    def _chunk(self, rid: int, tokens: int, computed: int) -> None:
        self._chunks.append((rid, tokens, computed))

    def _stamp(self, res: StepResult | None, pool: str) -> None:
        """Hand the chunks of the rank step just run to ``on_chunk_at`` with that step's times."""
        if res is not None and self.on_chunk_at is not None:
            end = res.start_ns + res.duration_ns
            for rid, tokens, computed in self._chunks:
                self.on_chunk_at(rid, tokens, computed, res.start_ns, end, res.prefill_tokens, res.decode_tokens, pool)
        self._chunks.clear()

    def _hand_off(self, i: int, rid: int, end: int) -> None:
        """A prefill rank sampled ``rid``'s token at ``end``: its KV leaves for the decode pool."""
        self._ranks[i].outstanding -= 1
        req = self._requests.get(rid)
        if req is None:
            return
        req.rank = -1
        assert self.transfer is not None  # checked at construction: only a disaggregated engine hands off
        xfer = self.transfer.ns(req.prompt)
        least = min(r.outstanding for r in self._ranks if r.decode) + 1
        wait = self.pickup(least, req.prompt) if self.pickup is not None else 0
        self.transfers += 1
        self.transfer_ns += xfer
        if self.on_transfer is not None:
            self.on_transfer(rid, end, end + xfer)
        heapq.heappush(self._arrivals, (end + xfer + wait, rid))

    def _deliver(self, now: int) -> None:
        """KV that has arrived by ``now``: the decode rank with the fewest requests admits it, prompt present."""
        while self._arrivals and self._arrivals[0][0] <= now:
            at, rid = heapq.heappop(self._arrivals)
            req = self._requests.get(rid)
            if req is None:  # aborted on the way
                continue
            i = self._least(True)
            rank = self._ranks[i]
            rank.replica.add(rid, req.prompt, req.max_tokens, at, req.hashes, kv_ready=req.prompt)
            req.rank = i
            rank.outstanding += 1
            self._woken(rank, at)


class DataParallelEngine(DisaggregatedEngine):
    """One aggregated replica's attention-DP ranks behind one ReplicaEngine (``serve --attention-dp N``): each request
    runs whole — prefill and decode — on the rank with the fewest requests, every rank on its own timeline, as
    ``sim`` runs them (one replica per rank). Built with :meth:`from_cluster` (``decode`` holds the ranks; there is no
    prefill pool and no KV transfer)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        if self.prefill or not self.decode:
            raise ValueError("an attention-DP engine has its ranks in decode and no prefill pool")
        self._ranks = [_Rank(r, True) for r in self.decode]
        for r in self.decode:
            r.on_admit = self._admitted

    @classmethod
    def from_cluster(cls, cluster: ClusterSpec) -> DataParallelEngine:
        """The ``attention_dp`` ranks of one replica of an aggregated :class:`~tailscope.engine.cluster.ClusterSpec`."""
        if cluster.disagg is not None:
            raise ValueError("a disaggregated cluster: use DisaggregatedEngine")
        perf = cluster.perf()
        return cls([], [cluster.new_replica(perf) for _ in range(cluster.attention_dp)])

    @property
    def perf(self) -> RanksFrontend:
        """The API server's prices, per rank's share of the requests in flight (as ``sim``'s one server per rank)."""
        return RanksFrontend(self.decode[0].perf, len(self.decode))

    def add_request(self, request: EngineRequest) -> None:
        """Queue ``request`` whole on the rank with the fewest requests. Raises ValueError when prompt + output can
        never fit a rank's KV cache."""
        self._enqueue(request, whole=True)

    def _pool(self, rank: _Rank) -> str:
        return ""
