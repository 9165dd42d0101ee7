"""One model replica: vLLM-v1-style continuous batching over a paged KV cache, timed by the step model.

Scheduling of one step (mirrors vLLM v1's ``Scheduler.schedule``; differences are listed in docs/engine.md):

1. Running decodes first: each takes one token of the budget and, every ``block_size`` tokens, one new block.
   When blocks run out, the newest running request is preempted (recompute: its blocks are freed — full ones stay
   in the prefix cache — and it goes back to the *front* of the waiting queue with prompt = prompt + output so far).
2. Running requests still in (chunked) prefill get their next chunk, in admission order, up to the budget.
3. Waiting requests are admitted by priority (lower ``priority`` first, vLLM's convention), then FCFS, while the
   token budget (``max_num_batched_tokens``), ``max_num_seqs`` and free blocks allow; a prefix-cache lookup first
   skips the blocks already cached. A request that does not fit blocks the queue (no skipping ahead). With batch
   waiting (``EngineConfig.batch_wait_iters``/``batch_wait_ratio``, TensorRT-LLM's), none is admitted while requests
   decode until the step's tokens reach the ratio × the budget or the prompts have been held that many steps. With
   SGLang's receive interval (``EngineConfig.recv_interval``) they are taken in only every that many decode steps.

Two options change what a preemption costs and who waits:

* priority classes: a request's ``priority`` (from its workload class) orders the waiting queue (then FCFS), and the
  preemption victim is the newest running request of the largest priority value (vLLM's ``--scheduling-policy
  priority``; unlike vLLM, a waiting request never preempts a running one to get in).
* KV offload (``EngineConfig.kv_offload_gib``): a preempted request's computed KV is swapped out to CPU memory and
  back at ``kv_offload_gbps`` per GPU instead of being recomputed, while host memory lasts; the copies are added to
  the step in which they happen (not overlapped with compute).

A request can also arrive with its KV already present (``kv_ready``: a disaggregated decode worker receiving a
prompt's KV from a prefill worker); it is admitted without prefill.

Decoding requests are kept in aggregate (their KV lengths grow by one per step), so a step costs O(prefill
chunks + admissions + completions), not O(batch). That is what lets ``sim`` run far faster than real time.

Where it lives: this module runs the steps (the protocol, steps 1, 2, 4 and 5 of a step, decode-only stretches,
completions, token times); ``replica_admission.py`` holds the waiting queue, admission (step 3) and preemption;
``replica_kv.py`` the block pool and the host-memory offload; ``sched_request.py`` a request's scheduling state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, fields

from tailscope.engine.api import EngineRequest, EngineStats, StepResult
from tailscope.engine.engine_config import EngineConfig, vllm_default_limits
from tailscope.engine.perf import StepModel
from tailscope.engine.replica_admission import Admission
from tailscope.engine.sched_request import DECODE, DONE, PREFILL, WAITING, SchedRequest

__all__ = ["Completion", "EngineConfig", "Replica", "vllm_default_limits"]


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished request as the simulator needs it: step indices of its token emissions."""

    id: int
    segments: tuple[tuple[int, int], ...]  # inclusive (first step, last step) runs of one token per step
    outputs: int
    preemptions: int
    hit_tokens: int


_C_NEW = object.__new__
_C_ID, _C_SEGMENTS, _C_OUTPUTS, _C_PREEMPTIONS, _C_HITS = (
    getattr(Completion, f.name).__set__ for f in fields(Completion)
)


class Replica(Admission):
    """A :class:`~tailscope.engine.api.ReplicaEngine` for one replica of ``perf.model`` on ``perf.gpu``."""

    def __init__(self, perf: StepModel, config: EngineConfig | None = None) -> None:
        self.perf = perf
        #: a calibrated twin's machine-speed factor over time (see engine/twin.py SpeedNoise); None for the roofline
        self._speed: Callable[[int], float] | None = getattr(perf, "speed_factor", None)
        self.config = (config or EngineConfig()).validate()
        super().__init__(perf, self.config)
        self._max_batched = self.config.max_num_batched_tokens
        # batch waiting: steps the waiting prompts may be held at most (0: never), the tokens that end it, the count
        on = self.config.batch_wait_iters > 0 and self.config.batch_wait_ratio > 0
        self._wait_iters = self.config.batch_wait_iters if on else 0
        self._wait_tokens = self.config.batch_wait_ratio * self._max_batched
        self._held = 0
        # SGLang's receive interval: its scheduler takes requests in at the step after one with prompts and every
        # ``recv_interval`` decode steps from there (the step it counts from)
        self._recv_interval = self.config.recv_interval
        self._recv_from = 0
        self._heap: list[tuple[int, int, int]] = []  # (finish step, id, epoch)
        self.steps = 0  # index of the next step
        self.step_end_ns: list[int] = []  # end time of step i at index i − _times_base
        self._times_base = 0
        self._next_trim = 8192
        self.now_ns = 0
        self._prompt_total = 0
        self._gen_total = 0
        self.completions: list[Completion] = []  # with ``keep_history``
        #: called, when set, with a request's id, the prompt tokens its prefill chunk computes in the step being run
        #: and the tokens already computed before it (prefix-cache hit or earlier chunks), once per chunk: ``serve``
        #: exports one ``prefill`` span per chunk from it (off by default: a check per chunk, nothing more)
        self.on_chunk: Callable[[int, int, int], None] | None = None

    # ---- protocol -------------------------------------------------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.pool.total * self.block_size

    def add_request(self, request: EngineRequest) -> None:
        """Queue ``request`` (FCFS). Raises ValueError when prompt + output can never fit the KV cache."""
        self.add(request.id, request.prompt_tokens, request.max_tokens, request.arrival_ns, request.block_hashes)

    def add(
        self,
        rid: int,
        prompt_tokens: int,
        max_tokens: int,
        arrival_ns: int = 0,
        block_hashes: tuple[int, ...] = (),
        *,
        priority: int = 0,
        kv_ready: int = 0,
    ) -> None:
        """:meth:`add_request` without building an :class:`EngineRequest` (the simulator's hot path).

        ``priority``: lower is admitted first (ties FCFS). ``kv_ready``: leading prompt tokens whose KV arrives
        with the request (disaggregated decode); only the rest is computed."""
        if prompt_tokens < 1 or max_tokens < 1:
            raise ValueError(f"request {rid}: prompt_tokens and max_tokens must be ≥ 1")
        if prompt_tokens + max_tokens > self.pool.total * self.block_size:
            raise ValueError(
                f"request {rid}: {prompt_tokens}+{max_tokens} tokens exceed the KV cache "
                f"({self.capacity_tokens} tokens)"
            )
        if rid in self._all:
            raise ValueError(f"request {rid} is already queued")
        r = SchedRequest(rid, prompt_tokens, max_tokens, arrival_ns, block_hashes, self.block_size)
        if kv_ready:
            r.ready = min(kv_ready, prompt_tokens - 1)
        self._all[rid] = r
        if priority:
            r.priority = priority
            self._prio = True
        if self._prio:
            self._enqueue(r, front=False)
        else:
            self._waiting.append(r)

    def abort(self, request_id: int) -> None:
        """Drop a request and free its blocks (no-op for unknown ids)."""
        r = self._all.pop(request_id, None)
        if r is None:
            return
        if r.state == WAITING:
            self._waiting.remove(r)
            if r.in_host:
                self._off_used -= r.ready
        else:
            self._remove_running(r)
            self._free(r, finished=True)
        r.state = DONE

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def stats(self) -> EngineStats:
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_usage=self.pool.used / self.pool.total,
            kv_blocks_total=self.pool.total,
            prefix_queries_tokens=self._prefix_queries,
            prefix_hits_tokens=self._prefix_hits,
            preemptions=self._preemptions,
            prompt_tokens_total=self._prompt_total,
            generation_tokens_total=self._gen_total,
            extra={
                "evictions": float(self.pool.evictions),
                "steps": float(self.steps),
                "recompute_tokens": float(self._recompute_tokens),
                "kv_swapped_tokens": float(self._swapped_tokens),
                "kv_swap_s": self._swap_total_ns / 1e9,
            },
        )

    def step(self, now_ns: int) -> StepResult | None:
        """Run one step from ``now_ns`` and report every token produced (O(batch): for ``serve``)."""
        decoding = list(self._decoding)
        res = self._step(now_ns)
        if res is None:
            return None
        duration, first, finished, preempted, prefill_tokens, n_dec = res
        emitted = [(i, 1) for i in decoding if i not in preempted] + [(r, 1) for r in first]
        return StepResult(
            start_ns=now_ns,
            duration_ns=duration,
            emitted=tuple(emitted),
            finished=tuple(c.id for c in finished),
            preempted=tuple(preempted),
            prefill_tokens=prefill_tokens,
            decode_tokens=n_dec,
        )

    def step_fast(
        self, now_ns: int, until_ns: int | None = None, *, through_finishes: bool = False
    ) -> tuple[int, list[Completion], list[int]] | None:
        """Run one step without listing every emitted token: ``(duration_ns, completions, preempted ids)``.

        With ``until_ns`` (the time of the next outside event that could change this replica's schedule), a
        decode-only stretch continues with further steps as long as they start before ``until_ns`` and no request
        needs preempting or admitting — exactly what single steps would do, at a fraction of the cost. The
        returned duration covers all of them; token times come from :meth:`token_times` as usual. Completions stop
        the stretch unless ``through_finishes`` (for callers to whom a completion's exact time matters only
        through its token times: open-loop traffic without sessions).
        """
        res = self._step(now_ns)
        if res is None:
            return None
        duration, _first, finished, preempted, _, _ = res
        if until_ns is None or preempted or self._waiting or self._prefilling or not self._decoding:
            return duration, finished, preempted
        if finished and not through_finishes:
            return duration, finished, preempted
        end = now_ns + duration
        if end >= until_ns:  # no room for a further step (the state after _step is already final)
            return duration, finished, preempted
        heap = self._heap
        pool = self.pool
        phase = self._phase
        bs = self.block_size
        n = len(self._decoding)
        k = self._dec_k
        times = self.step_end_ns
        step_ns = self.perf.decode_step_ns
        speed = self._speed
        T = self.steps
        gen = 0
        while end < until_ns:
            top = heap[0][0]
            if top <= T and not through_finishes:
                break
            need = phase[T % bs]
            if need > pool.free_plain + pool.n_cached:
                break
            d = step_ns(n, k + n * T)
            if speed is not None:
                d = max(1, int(d * speed(end)))
            if finished and end + d > until_ns:
                break  # deliver the completions before the outside event sees this replica's state
            if need:
                if need <= pool.free_plain:  # BlockPool.allocate's common case, inline
                    pool.free_plain -= need
                else:
                    pool.allocate(need)
            end += d
            times.append(end)
            gen += n
            T += 1
            if top < T:  # requests finished in the step just run
                self.steps = T
                self._alloc_step = T - 1
                while heap and heap[0][0] < T:
                    _, rid, epoch = heapq.heappop(heap)
                    r2 = self._all.get(rid)
                    if r2 is None or r2.epoch != epoch or r2.state != DECODE:
                        continue
                    finished.append(self._finish_decode(r2, T - 1))
                n = len(self._decoding)
                k = self._dec_k
                if self._waiting or not n:
                    break
        self._gen_total += gen
        self.steps = T
        self._alloc_step = T - 1
        self.now_ns = end
        return end - now_ns, finished, preempted

    def step_time_ns(self, index: int) -> int:
        """End time of step ``index`` (valid for steps of live requests)."""
        return self.step_end_ns[index - self._times_base]

    def token_times(self, c: Completion) -> tuple[int, ...]:
        """Emission time of each output token of a completed request."""
        base = self._times_base
        t = self.step_end_ns
        if len(c.segments) == 1:
            a, b = c.segments[0]
            return tuple(t[a - base : b - base + 1])
        out: list[int] = []
        for a, b in c.segments:
            out.extend(t[a - base : b - base + 1])
        return tuple(out)

    # ---- internals ------------------------------------------------------------------------------------------
    def _step(self, now_ns: int) -> tuple[int, list[int], list[Completion], list[int], int, int] | None:
        bs = self.block_size
        pool = self.pool
        T = self.steps
        budget = self._max_batched
        preempted: list[int] = []
        # 1. decodes
        need = self._phase[T % bs]
        while need > pool.free_plain + pool.n_cached and self._running:
            self._preempt_newest(preempted)
            need = self._phase[T % bs]
        n_dec = len(self._decoding)
        if need:
            if need <= pool.free_plain:  # BlockPool.allocate's common case, inline
                pool.free_plain -= need
            else:
                pool.allocate(need)
        self._alloc_step = T
        chunks: list[tuple[SchedRequest, int, int]] = []
        prefill: list[tuple[int, int]] = []
        completing = 0
        if self._prefilling or self._waiting:  # else a decode-only step (half the steps of a busy replica)
            budget -= n_dec
            # 2. running prefills (chunked), admission order
            for r in list(self._prefilling.values()) if self._prefilling else ():
                if budget <= 0:
                    break
                if r.state != PREFILL:  # preempted by an earlier iteration
                    continue
                c = min(r.num_tokens - r.computed, budget)
                extra = -(-(r.computed + c) // bs) - r.blocks
                while extra > pool.free and r.state == PREFILL:
                    self._preempt_newest(preempted)
                if r.state != PREFILL:
                    continue
                pool.allocate(extra)
                r.blocks += extra
                chunks.append((r, c, r.computed))
                prefill.append((c, r.computed))
                if r.computed + c == r.num_tokens:
                    completing += 1
                budget -= c
            # decodes preempted during step 2 no longer run this step
            n_dec = len(self._decoding)
            # 3. waiting requests, by priority then FCFS (replica_admission.py), unless batch waiting holds them
            if self._waiting and not (self._wait_iters and n_dec and self._hold(n_dec)) and self._receives(n_dec):
                completing += self._admit_waiting(budget, chunks, prefill)
        if not chunks and n_dec == 0:
            return None
        # 4. time
        if chunks:
            duration = self.perf.mixed_step_ns(prefill, n_dec, self._dec_k + n_dec * T, n_dec + completing)
        else:
            duration = self.perf.decode_step_ns(n_dec, self._dec_k + n_dec * T)
        if self._speed is not None:
            duration = max(1, int(duration * self._speed(now_ns)))
        if self._swap_pending_ns:
            duration += int(self._swap_pending_ns)
            self._swap_pending_ns = 0.0
        end = now_ns + duration
        self.now_ns = end
        self.step_end_ns.append(end)
        self.steps = T + 1
        if chunks:
            self._recv_from = T + 1
        # 5. apply
        prefill_tokens = 0
        first: list[int] = []
        finished: list[Completion] = []
        heap = self._heap
        caching = pool.enable_caching
        prefilling = self._prefilling
        on_chunk = self.on_chunk
        for r, c, p in chunks:
            prefill_tokens += c
            if on_chunk is not None and c > 0:
                on_chunk(r.id, c, p)
            computed = r.computed = p + c
            if caching and (r.n_given or r.salt == 0):
                # publish newly full blocks so concurrent requests can share them (unique chains only
                # matter after the request ends, when _free caches them)
                full = computed // bs if r.salt == 0 else min(computed // bs, r.n_given)
                if full > r.n_reg:
                    chain = self._hashes(r, full)
                    while r.n_reg < full and pool.register(chain[r.n_reg]):
                        r.n_reg += 1
            if computed < r.num_tokens:
                continue
            # prompt complete: sample a token
            rid = r.id
            del prefilling[rid]
            outputs = r.outputs = r.outputs + 1
            first.append(rid)
            if r.first_step < 0:
                r.first_step = T
            r.seg_start = T
            if outputs >= r.max_tokens:
                r.state = DONE
                del self._running[rid]
                finished.append(self._complete(r, T))
                continue
            r.state = DECODE
            r.out_base = outputs - 1
            k = r.k = computed - T - 1
            r.finish_step = T + (r.max_tokens - outputs)
            self._decoding[rid] = r
            self._phase[(-k) % bs] += 1
            self._dec_k += k
            heapq.heappush(heap, (r.finish_step, rid, r.epoch))
        self._prompt_total += prefill_tokens
        self._gen_total += n_dec + len(first)
        while heap and heap[0][0] <= T:
            _, rid, epoch = heapq.heappop(heap)
            r2 = self._all.get(rid)
            if r2 is None or r2.epoch != epoch or r2.state != DECODE:
                continue
            finished.append(self._finish_decode(r2, T))
        if self._next_trim <= T:  # fast-forwarded stretches can skip any particular step number
            self._next_trim = T + 4096
            if T - self._times_base > 8192:
                self._trim_times(finished)
        return duration, first, finished, preempted, prefill_tokens, n_dec

    def _receives(self, n_dec: int) -> bool:
        """SGLang's ``--scheduler-recv-interval``: whether the scheduler takes the waiting requests in at this step —
        when no request decodes, at the step after one with prompts, and every ``recv_interval`` steps from there (its
        counter weighs a decode step 1 and a step with prompts past the interval). Requests it took in but could not
        admit wait for the next such step here (SGLang would schedule them at any step)."""
        return self._recv_interval <= 1 or n_dec == 0 or (self.steps - self._recv_from) % self._recv_interval == 0

    def _hold(self, n_dec: int) -> bool:
        """Batch waiting (``EngineConfig.batch_wait_iters``/``batch_wait_ratio``): hold the waiting prompts this
        step, while ``n_dec`` requests decode, until the step's tokens (the prompts' and one per decode) reach the
        threshold or they have been held the iterations allowed; the count restarts when they are let in."""
        tokens = n_dec + sum(r.num_tokens - r.computed for r in self._waiting)
        if self._held >= self._wait_iters or tokens >= self._wait_tokens:
            self._held = 0
            return False
        self._held += 1
        return True

    def _finish_decode(self, r: SchedRequest, T: int) -> Completion:
        """A decoding request produced its last token in step ``T``: :meth:`_remove_running` + :meth:`_complete`."""
        del self._running[r.id]
        self._sync_decode(r)
        del self._decoding[r.id]
        self._phase[(-r.k) % self.block_size] -= 1
        self._dec_k -= r.k
        r.epoch += 1
        r.state = DONE
        return self._complete(r, T)

    def _complete(self, r: SchedRequest, T: int) -> Completion:
        r.segments.append((r.seg_start, T))
        r.seg_start = -1
        if r.salt and not r.n_reg:  # unique content, nothing shared: every block simply becomes free
            self.pool.free_plain += r.blocks
            r.blocks = 0
        else:
            self._free(r, finished=True)
        del self._all[r.id]
        c = _C_NEW(Completion)  # Completion(...) without the frozen dataclass's per-field object.__setattr__
        _C_ID(c, r.id)
        _C_SEGMENTS(c, tuple(r.segments))
        _C_OUTPUTS(c, r.max_tokens)
        _C_PREEMPTIONS(c, r.preemptions)
        _C_HITS(c, r.hit_tokens)
        if self.keep_history:
            self.completions.append(c)
        return c

    def _trim_times(self, finished: list[Completion]) -> None:
        live = [s for r in self._all.values() for s in ([r.seg_start] if r.seg_start >= 0 else [])]
        live += [seg[0] for r in self._all.values() for seg in r.segments]
        # completions of this very step have left _all, but the caller has yet to read their token times
        live += [seg[0] for c in finished for seg in c.segments]
        low = min(live, default=self.steps)
        cut = low - self._times_base
        if cut > 4096:
            del self.step_end_ns[:cut]
            self._times_base = low
