"""A request's scheduling state inside a replica: :class:`SchedRequest` and its life-cycle states.

``engine/replica.py`` runs the steps, ``engine/replica_admission.py`` moves requests between the waiting queue and
the running set, ``engine/replica_kv.py`` accounts their KV blocks; all three read and write these records.
"""

from __future__ import annotations

__all__ = ["DECODE", "DONE", "PREFILL", "WAITING", "SchedRequest"]

#: life-cycle states: queued (new or preempted), in (chunked) prefill, decoding, finished or aborted
WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class SchedRequest:
    """One request as a replica schedules it (mutable, slotted: the scheduler updates it every step).

    A decoding request's counters (``computed``, ``blocks``, ``outputs``, ``num_tokens``) are kept in aggregate
    by the replica and only materialised when it leaves the decode set (see ``Admission._sync_decode``).
    """

    __slots__ = (
        "arrival_ns",
        "blocks",
        "chain",
        "computed",
        "epoch",
        "finish_step",
        "first_step",
        "hit_tokens",
        "id",
        "in_host",
        "k",
        "max_tokens",
        "n_given",
        "n_reg",
        "num_tokens",
        "out_base",
        "outputs",
        "preemptions",
        "priority",
        "prompt",
        "ready",
        "salt",
        "seg_start",
        "segments",
        "state",
    )

    def __init__(
        self, rid: int, prompt: int, max_tokens: int, arrival_ns: int, block_hashes: tuple[int, ...], block_size: int
    ) -> None:
        self.id = rid
        self.arrival_ns = arrival_ns
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.num_tokens = prompt  # tokens that must be in the KV cache before the next sample
        self.computed = 0
        self.outputs = 0
        self.out_base = 0
        self.blocks = 0
        self.n_reg = 0
        self.chain = list(block_hashes)
        self.n_given = len(self.chain)
        full = prompt // block_size
        # given hashes covering the whole prompt → continue that chain (sessions can predict it); else unique salt
        self.salt = 0 if (self.chain and len(self.chain) >= full) else (hash((0x5EED_0F_5A17, rid, arrival_ns)) | 1)
        self.k = 0
        self.finish_step = -1
        self.first_step = -1
        self.seg_start = -1
        self.segments: list[tuple[int, int]] = []
        self.epoch = 0
        self.state = WAITING
        self.hit_tokens = 0
        self.preemptions = 0
        self.priority = 0
        self.ready = 0  # tokens whose KV is present without computing (swapped out to the host, or transferred)
        self.in_host = False  # ``ready`` tokens are in host memory (swap them in on admission)
