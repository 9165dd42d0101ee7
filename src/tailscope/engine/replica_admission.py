"""Who runs on a replica: the waiting queue (priorities, then FCFS), admission into the running set with a
prefix-cache lookup, and preemption when KV blocks run out.

:class:`Admission` sits between :class:`~tailscope.engine.replica_kv.KvAccounting` (the blocks) and
:class:`~tailscope.engine.replica.Replica` (the steps): it owns the queue, the running, prefilling and decoding sets
and the counters ``stats()`` reports about them. The scheduling rules are described in ``engine/replica.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from tailscope.engine.engine_config import EngineConfig
from tailscope.engine.perf import StepModel
from tailscope.engine.replica_kv import KvAccounting
from tailscope.engine.sched_request import DECODE, PREFILL, WAITING, SchedRequest

__all__ = ["Admission"]


class Admission(KvAccounting):
    """The waiting queue and the running set of one replica, and the moves between them."""

    #: index of the next step (advanced by :class:`~tailscope.engine.replica.Replica`'s step loop)
    steps: int

    def __init__(self, perf: StepModel, config: EngineConfig) -> None:
        super().__init__(perf, config)
        self._max_seqs = config.max_num_seqs
        self._waiting: deque[SchedRequest] = deque()
        self._running: dict[int, SchedRequest] = {}  # insertion order = admission order (newest last)
        self._prefilling: dict[int, SchedRequest] = {}
        self._decoding: dict[int, SchedRequest] = {}
        self._phase = [0] * self.block_size  # decoding requests by the step residue at which they need a new block
        self._dec_k = 0  # Σ k over decoding requests; their KV lengths before step T sum to _dec_k + n·T
        self._alloc_step = -1
        self._all: dict[int, SchedRequest] = {}
        self._prefix_queries = 0
        self._prefix_hits = 0
        self._preemptions = 0
        self._recompute_tokens = 0
        self._prio = False  # some request has a non-zero priority (else the plain FCFS fast path)
        #: with ``keep_history`` (tests, small what-ifs) completions and first-admission order are kept;
        #: off by default so memory stays bounded over millions of requests
        self.keep_history = False
        self.admissions: list[int] = []
        #: called with a request's id and its prefix-cache hit (tokens) when it is first scheduled (its queue wait
        #: ends): ``serve`` stamps it and reports the hit as the response's ``cached_tokens``
        self.on_admit: Callable[[int, int], None] | None = None

    def _enqueue(self, r: SchedRequest, *, front: bool) -> None:
        """Queue ``r`` by priority: a new request after every request of its priority or better, a preempted one
        before every request of its priority or worse."""
        w = self._waiting
        if front:
            i = 0
            while i < len(w) and w[i].priority < r.priority:
                i += 1
        else:
            i = len(w)
            while i > 0 and w[i - 1].priority > r.priority:
                i -= 1
        w.insert(i, r)

    def _remove_running(self, r: SchedRequest) -> None:
        del self._running[r.id]
        if r.state == DECODE:
            self._sync_decode(r)
            del self._decoding[r.id]
            self._phase[(-r.k) % self.block_size] -= 1
            self._dec_k -= r.k
        elif r.state == PREFILL:
            del self._prefilling[r.id]
        r.epoch += 1

    def _sync_decode(self, r: SchedRequest) -> None:
        """Materialise a decoding request's counters at the current step boundary."""
        done = self.steps  # steps completed so far
        r.computed = r.k + done
        # during step T after the decode allocation, the block for this step's token is already held
        extra = 1 if self._alloc_step == done else 0
        r.blocks = -(-(r.computed + extra) // self.block_size)
        r.outputs = r.out_base + 1 + (done - 1 - r.seg_start)
        r.num_tokens = r.computed + 1

    def _preempt_newest(self, preempted: list[int]) -> SchedRequest:
        if self._prio:  # the newest request of the least urgent class
            r = max(reversed(self._running.values()), key=lambda x: x.priority)
        else:
            r = next(reversed(self._running.values()))
        was_decoding = r.state == DECODE
        self._remove_running(r)
        if was_decoding:
            r.segments.append((r.seg_start, self.steps - 1))
        r.seg_start = -1
        tokens = r.computed
        if self._off_cap and 0 < tokens <= self._off_cap - self._off_used:
            # swap out: the computed KV goes to host memory and comes back on re-admission
            self._off_used += tokens
            r.ready = tokens
            r.in_host = True
            self._swap(tokens)
            self._free(r, finished=True)
        else:
            self._free(r)
        # recompute preemption: everything generated so far becomes prompt
        r.num_tokens = r.prompt + r.outputs
        r.computed = 0
        r.state = WAITING
        r.preemptions += 1
        self._preemptions += 1
        if self._prio:
            self._enqueue(r, front=True)
        else:
            self._waiting.appendleft(r)
        preempted.append(r.id)
        return r

    def _admit_waiting(
        self, budget: int, chunks: list[tuple[SchedRequest, int, int]], prefill: list[tuple[int, int]]
    ) -> int:
        """Step 3 of a step: admit waiting requests in queue order while ``budget`` (tokens), ``max_num_seqs`` and
        free blocks allow, appending each one's first chunk to ``chunks`` and ``prefill``. A request that does not
        fit blocks the queue. Returns how many of them complete their prompt in this step."""
        bs = self.block_size
        pool = self.pool
        completing = 0
        waiting = self._waiting
        max_seqs = self._max_seqs
        caching = pool.enable_caching
        running = self._running
        while waiting and budget > 0 and len(running) < max_seqs:
            r = waiting[0]
            hit = g = 0
            ready = r.ready
            if ready:  # KV present (host or transferred): no lookup, nothing to recompute
                pass
            elif caching and (r.n_given or r.preemptions):
                max_hit = (r.num_tokens - 1) // bs
                if r.salt == 0:
                    hit = pool.lookup(self._hashes(r, max_hit), max_hit)
                else:
                    if r.n_given:
                        hit = pool.lookup(r.chain, min(max_hit, r.n_given))
                    if r.preemptions:  # only a preempted request can find its own blocks again
                        g = pool.group_hit(r.salt, hit, max_hit - hit)
            start = ready if ready else (hit + g) * bs
            c = r.num_tokens - start
            if c > budget:
                c = budget
            new_blocks = -(-(start + c) // bs) - hit - g
            if hit or g:
                if new_blocks > pool.free_plain + pool.n_cached - g - pool.cached_among(r.chain, hit):
                    break
                if hit:
                    pool.acquire(r.chain, hit)
                if g:
                    pool.take_group(r.salt, g)
            elif new_blocks > pool.free_plain + pool.n_cached:
                break
            if 0 < new_blocks <= pool.free_plain:
                pool.free_plain -= new_blocks
            else:
                pool.allocate(new_blocks)
            waiting.popleft()
            if ready:
                r.ready = 0
                if r.in_host:
                    r.in_host = False
                    self._off_used -= ready
                    self._swap(ready)
            elif r.preemptions:
                self._recompute_tokens += r.num_tokens - start
            r.n_reg = hit
            r.blocks = hit + g + new_blocks
            r.computed = start
            if r.preemptions == 0:
                if self.keep_history:
                    self.admissions.append(r.id)
                if self.on_admit is not None:
                    self.on_admit(r.id, start)
                if not ready:
                    self._prefix_queries += r.num_tokens
                    self._prefix_hits += start
                    r.hit_tokens = start
            r.state = PREFILL
            self._running[r.id] = r
            self._prefilling[r.id] = r
            chunks.append((r, c, start))
            prefill.append((c, start))
            if start + c == r.num_tokens:
                completing += 1
            budget -= c
        return completing
