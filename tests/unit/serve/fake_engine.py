"""A small deterministic ReplicaEngine for serve tests (not the real engine model).

Every step admits waiting requests FCFS up to ``max_num_seqs``, prefills each admitted prompt whole (its first
token comes out of that step) and decodes one token for every running request. Step time is
``base_ms + prefill_ms_per_token * prefill tokens + decode_ms_per_seq * decoding sequences``.
"""

from __future__ import annotations

from collections import deque

from tailscope.engine.api import EngineRequest, EngineStats, StepResult


class FakeEngine:
    """Deterministic continuous-batching stand-in with linear step times."""

    def __init__(
        self,
        *,
        base_ms: float = 5.0,
        prefill_ms_per_token: float = 0.01,
        decode_ms_per_seq: float = 0.05,
        max_num_seqs: int = 64,
        max_prompt_tokens: int = 100_000,
        kv_blocks: int = 10_000,
    ) -> None:
        self.base_ns = int(base_ms * 1e6)
        self.prefill_ns = int(prefill_ms_per_token * 1e6)
        self.decode_ns = int(decode_ms_per_seq * 1e6)
        self.max_num_seqs = max_num_seqs
        self.max_prompt_tokens = max_prompt_tokens
        self.kv_blocks = kv_blocks
        self.waiting: deque[EngineRequest] = deque()
        self.running: dict[int, list[int]] = {}  # id -> [produced, max_tokens, prompt]
        self.steps: list[StepResult] = []
        self.aborted: list[int] = []
        self.seen_hashes: set[int] = set()
        self._stats = EngineStats()
        self._queries = self._hits = self._prompt = self._gen = 0

    def add_request(self, request: EngineRequest) -> None:
        if request.prompt_tokens > self.max_prompt_tokens:
            raise ValueError(f"prompt of {request.prompt_tokens} tokens can never fit the KV cache")
        self.waiting.append(request)

    def abort(self, request_id: int) -> None:
        self.aborted.append(request_id)
        self.running.pop(request_id, None)
        self.waiting = deque(r for r in self.waiting if r.id != request_id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self, now_ns: int) -> StepResult | None:
        if not self.has_work():
            return None
        emitted: list[tuple[int, int]] = []
        finished: list[int] = []
        decode = 0
        for rid, state in list(self.running.items()):
            state[0] += 1
            decode += 1
            emitted.append((rid, 1))
            if state[0] >= state[1]:
                finished.append(rid)
                del self.running[rid]
        prefill = 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting.popleft()
            self._queries += req.prompt_tokens
            hits = 0
            for h in req.block_hashes:
                if h not in self.seen_hashes:
                    break
                hits += 16
            self._hits += hits
            self.seen_hashes.update(req.block_hashes)
            prefill += req.prompt_tokens - hits
            self._prompt += req.prompt_tokens
            emitted.append((req.id, 1))
            if req.max_tokens <= 1:
                finished.append(req.id)
            else:
                self.running[req.id] = [1, req.max_tokens, req.prompt_tokens]
        self._gen += len(emitted)
        duration = self.base_ns + self.prefill_ns * prefill + self.decode_ns * decode
        result = StepResult(
            start_ns=now_ns,
            duration_ns=duration,
            emitted=tuple(emitted),
            finished=tuple(finished),
            prefill_tokens=prefill,
            decode_tokens=decode,
        )
        self.steps.append(result)
        return result

    def stats(self) -> EngineStats:
        used = sum((s[2] + s[0]) // 16 + 1 for s in self.running.values())
        return EngineStats(
            running=len(self.running),
            waiting=len(self.waiting),
            kv_usage=min(1.0, used / self.kv_blocks),
            kv_blocks_total=self.kv_blocks,
            prefix_queries_tokens=self._queries,
            prefix_hits_tokens=self._hits,
            prompt_tokens_total=self._prompt,
            generation_tokens_total=self._gen,
        )
