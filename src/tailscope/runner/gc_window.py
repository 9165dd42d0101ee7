"""The garbage collector during a load: what the run's set-up left is frozen, so that no collection pass stalls the
event loop while token events arrive.

Why: a full collection scans every object the collector tracks. When a bench's load starts its process holds
34,000–43,000 of them (the modules, the configuration's models, the schedule, the store's connection: measured at
256 streams), and one pass over them took 6–9.5 ms. Token events that reach the client meanwhile are read together,
and the earlier ones take the later one's arrival stamp — the kernel stamps too, since the kernel stamps a read, not an
event (measured at 256 streams, 10 requests each: TTFT error p99 2.7–9.9 ms with the collector as it is, 0.02 ms with
the set-up frozen; docs/scale-out.md, "The collector during the load"). :func:`gc.freeze` moves every live object out
of the collector's reach: the passes then scan only what the run itself creates — shorter, and they still reclaim its
garbage, so an hours-long run's memory stays bounded.
"""

from __future__ import annotations

import gc


def freeze_setup() -> bool:
    """Freeze every object that exists now (the load's set-up). Returns whether it froze: not where the collector is
    off or objects are frozen already (the caller's freeze is the caller's to undo).

    No collection first: that pass would add its 6–9.5 ms to the run's start; whatever garbage the set-up left is
    frozen with it and collectable again after the run."""
    if not gc.isenabled() or gc.get_freeze_count():
        return False
    gc.freeze()
    return True


def thaw(frozen: bool) -> None:
    """Undo :func:`freeze_setup` (``frozen``: what it returned): the frozen objects are collectable again."""
    if frozen:
        gc.unfreeze()
