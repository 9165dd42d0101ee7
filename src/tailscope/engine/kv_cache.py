"""Paged KV cache with a prefix cache, as vLLM v1's ``BlockPool`` / ``KVCacheManager`` keep it.

Blocks hold ``block_size`` tokens. A *full* block can carry a hash; hashes are chained (the hash of block ``i``
depends on block ``i − 1``), so equal hashes mean equal prefixes. States of a physical block:

* in use, hashed (``active[h]`` = reference count — several requests may share it),
* in use, private (counted only in ``used``),
* free and cached (``cached``, an LRU: reusable on a prefix hit until evicted),
* free and empty (``free_plain``).

Allocation takes empty blocks first and then evicts the least recently freed cached block, so a cached block
survives as long as possible. Invariant: ``used + n_cached + free_plain == total``.

*Fragmented* blocks (``lost``; the autoscaler's fragmentation model, ``engine/autoscaler.py``) are counted in
``used``: memory the allocator can no longer hand out, as a real engine's fragmented GPU memory is — until the
replica is rebuilt.
"""

from __future__ import annotations

from collections import OrderedDict

_MASK = (1 << 61) - 1


def chain_hash(parent: int, salt: int) -> int:
    """Hash of the next block given its parent's hash and a salt (block index or content id); deterministic."""
    return hash((parent, salt)) & _MASK


def extend_hashes(hashes: list[int], n_blocks: int, salt: int) -> None:
    """Append chained hashes to ``hashes`` until it has ``n_blocks`` (``salt`` 0 = continue the given chain)."""
    prev = hashes[-1] if hashes else chain_hash(salt, -1)
    for i in range(len(hashes), n_blocks):
        prev = chain_hash(prev, i ^ salt if salt else i)
        hashes.append(prev)


class BlockPool:
    """Block accounting with a hash-keyed prefix cache.

    Blocks of a request whose content nobody else can share (no caller-given hash) are cached as one *group*
    entry per request instead of one entry per block: only that request can hit them again (after a preemption),
    so the group needs no per-block hashes. Its blocks leave the cache tail-first, like single blocks do.

    Args:
        total_blocks: KV blocks on the replica.
        enable_caching: keep freed blocks for reuse (vLLM ``enable_prefix_caching``).
    """

    __slots__ = (
        "active",
        "cached",
        "enable_caching",
        "evictions",
        "free_plain",
        "group_start",
        "lost",
        "n_cached",
        "total",
    )

    def __init__(self, total_blocks: int, *, enable_caching: bool = True) -> None:
        if total_blocks < 1:
            raise ValueError("a KV cache needs at least one block")
        self.total = total_blocks
        self.free_plain = total_blocks
        # LRU of free cached entries: block hash → 1, or ("g", salt) → blocks of that request's group
        self.cached: OrderedDict[object, int] = OrderedDict()
        self.n_cached = 0
        self.group_start: dict[int, int] = {}
        self.active: dict[int, int] = {}
        self.enable_caching = enable_caching
        self.evictions = 0
        self.lost = 0  # fragmented: out of free_plain for good (see fragment_to)

    @property
    def free(self) -> int:
        """Blocks that an allocation can take (empty + evictable cached)."""
        return self.free_plain + self.n_cached

    @property
    def used(self) -> int:
        return self.total - self.free_plain - self.n_cached

    def fragment_to(self, lost: int) -> int:
        """Move the fragmented count toward ``lost`` blocks: more are taken from the empty blocks only (never from
        a request or the prefix cache), fewer are given back (``lost`` below today's: the allocator compacted).
        Returns the fragmented count now."""
        if lost > self.lost:
            take = min(lost - self.lost, self.free_plain)
            self.free_plain -= take
            self.lost += take
        elif lost < self.lost:
            back = self.lost - max(0, lost)
            self.free_plain += back
            self.lost -= back
        return self.lost

    def allocate(self, n: int) -> bool:
        """Take ``n`` blocks for private use; False (and nothing taken) when fewer are free."""
        if n <= 0:
            return True
        if n > self.free_plain + self.n_cached:
            return False
        take = min(n, self.free_plain)
        self.free_plain -= take
        rest = n - take
        if rest:
            cached = self.cached
            self.n_cached -= rest
            self.evictions += rest
            while rest:
                key, cnt = cached.popitem(last=False)
                if cnt > rest:
                    cached[key] = cnt - rest
                    cached.move_to_end(key, last=False)
                    rest = 0
                else:
                    rest -= cnt
                    if isinstance(key, tuple):
                        self.group_start.pop(key[1], None)
        return True

    def lookup(self, hashes: list[int], max_blocks: int) -> int:
        """Count leading blocks of ``hashes`` present in the cache (no state change)."""
        n = 0
        active, cached = self.active, self.cached
        for h in hashes[:max_blocks]:
            if h in active or h in cached:
                n += 1
            else:
                break
        return n

    def cached_among(self, hashes: list[int], n: int) -> int:
        """How many of the first ``n`` hashes are free-cached (a hit on them takes them out of the free count)."""
        cached = self.cached
        return sum(1 for h in hashes[:n] if h in cached)

    def group_hit(self, salt: int, start: int, max_blocks: int) -> int:
        """Blocks of request group ``salt`` reusable from block index ``start`` (at most ``max_blocks``)."""
        if self.group_start.get(salt) != start:
            return 0
        return min(self.cached[("g", salt)], max_blocks)

    def acquire(self, hashes: list[int], n: int) -> None:
        """Take references on the first ``n`` blocks of ``hashes`` (a prefix hit found by :meth:`lookup`)."""
        active, cached = self.active, self.cached
        for h in hashes[:n]:
            if h in active:
                active[h] += 1
            else:
                del cached[h]
                self.n_cached -= 1
                active[h] = 1

    def take_group(self, salt: int, n: int) -> None:
        """Reuse ``n`` blocks of group ``salt``; the rest of the group becomes empty blocks."""
        if n <= 0:
            return
        cnt = self.cached.pop(("g", salt))
        del self.group_start[salt]
        self.n_cached -= cnt
        self.free_plain += cnt - n

    def register(self, h: int) -> bool:
        """Publish a freshly computed private block under hash ``h``; False when that hash already exists."""
        if not self.enable_caching or h in self.active or h in self.cached:
            return False
        self.active[h] = 1
        return True

    def release(
        self,
        registered: list[int],
        n_registered: int,
        private_full: list[int],
        private_partial: int,
        group: tuple[int, int, int] | None = None,
    ) -> None:
        """Free one request's blocks.

        Args:
            registered: hashes of the request's shared (refcounted) blocks, first ``n_registered`` of them.
            private_full: hashes of its full private blocks (become cached when caching is on).
            private_partial: private blocks that are not full, or not worth caching (become empty).
            group: ``(salt, start index, count)`` of full private blocks cached as one group entry.
        """
        active, cached = self.active, self.cached
        # free in reverse order so the tail of a sequence is evicted before its prefix (as vLLM does)
        if group is not None and group[2] > 0:
            salt, start, cnt = group
            key = ("g", salt)
            old = cached.pop(key, 0)
            self.free_plain += old
            self.n_cached += cnt - old
            cached[key] = cnt
            self.group_start[salt] = start
        for h in reversed(private_full):
            if self.enable_caching and h not in active and h not in cached:
                cached[h] = 1
                self.n_cached += 1
            else:
                self.free_plain += 1
        for i in range(n_registered - 1, -1, -1):
            h = registered[i]
            c = active[h] - 1
            if c:
                active[h] = c
            else:
                del active[h]
                cached[h] = 1
                self.n_cached += 1
        self.free_plain += private_partial
