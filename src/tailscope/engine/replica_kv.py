"""A replica's KV memory: its paged block pool (with the prefix cache) and the host memory preempted KV is
swapped to.

:class:`KvAccounting` is the base of :class:`~tailscope.engine.replica.Replica`: it owns ``pool`` and the offload
counters, and gives a request's blocks back to the pool (cached under their hashes when someone can ask for them
again). Which request gets blocks, and when, is decided in ``engine/replica_admission.py`` and ``engine/replica.py``.
"""

from __future__ import annotations

from tailscope.engine.engine_config import EngineConfig
from tailscope.engine.kv_cache import BlockPool, extend_hashes
from tailscope.engine.perf import StepModel
from tailscope.engine.sched_request import SchedRequest

__all__ = ["KvAccounting"]


class KvAccounting:
    """The KV block pool of one replica and its host-memory offload (``EngineConfig.kv_offload_gib``)."""

    def __init__(self, perf: StepModel, config: EngineConfig) -> None:
        bs = config.block_size
        self.block_size = bs
        if config.num_blocks is not None:
            blocks = config.num_blocks
        else:
            blocks = perf.kv_capacity_tokens(config.gpu_memory_utilization) // bs
        self.pool = BlockPool(blocks, enable_caching=config.enable_prefix_caching)
        kv_bytes = float(getattr(perf, "kv_bytes_per_token", 0) or 0)
        gpus = max(1, int(getattr(perf, "tp", 1) or 1))
        #: host memory for swapped-out KV, tokens (0: preemption recomputes), and the tokens it holds now
        self._off_cap = int(config.kv_offload_gib * 2**30 / kv_bytes) if kv_bytes and config.kv_offload_gib > 0 else 0
        self._off_used = 0
        #: ns to copy one token's KV between GPU and host (every GPU of the replica copies its shard in parallel)
        self._swap_ns_per_token = kv_bytes / (config.kv_offload_gbps * 1e9 * gpus) * 1e9
        self._swap_pending_ns = 0.0  # copies to add to the next step's time
        self._swap_total_ns = 0.0
        self._swapped_tokens = 0

    def _hashes(self, r: SchedRequest, n: int) -> list[int]:
        if len(r.chain) < n:
            extend_hashes(r.chain, n, r.salt)
        return r.chain

    def _free(self, r: SchedRequest, *, finished: bool = False) -> None:
        full = r.computed // self.block_size
        pool = self.pool
        if not pool.enable_caching:
            pool.release(r.chain, 0, [], r.blocks)
        elif r.salt == 0:  # shareable chain (sessions): cache every full block under its hash
            chain = self._hashes(r, full)
            private_full = chain[r.n_reg : full]
            pool.release(chain, r.n_reg, private_full, r.blocks - r.n_reg - len(private_full))
        elif finished:  # unique content nobody can ask for again: the blocks are simply free
            pool.release(r.chain, r.n_reg, [], r.blocks - r.n_reg)
        else:  # preempted: one group entry, reusable by this request when it resumes
            g = max(0, full - r.n_reg)
            pool.release(r.chain, r.n_reg, [], r.blocks - r.n_reg - g, (r.salt, r.n_reg, g))
        r.blocks = 0
        r.n_reg = 0

    def _swap(self, tokens: int) -> None:
        ns = tokens * self._swap_ns_per_token
        self._swap_pending_ns += ns
        self._swap_total_ns += ns
        self._swapped_tokens += tokens
