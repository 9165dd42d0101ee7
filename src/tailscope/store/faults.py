"""A test hook: crash or fail the store's writer at a named point, so the fault matrix can hit every phase.

Set ``TAILSCOPE_TEST_FAULT`` to ``kill@POINT:N`` (SIGKILL this process the N-th time POINT is reached) or
``enospc@POINT:N`` (the first N times POINT is reached raise ``OSError(ENOSPC)``, as a full disk would; ``N`` may be
large). Several specs are separated by commas. Points:

- ``journal``: finished records are about to be appended to the run's journal;
- ``seal``: a batch has been fsynced and is about to be renamed into place;
- ``fold``: inside the fold transaction, rows inserted, before the commit;
- ``folded``: the fold committed, before its batch files are deleted.

Unset — always, outside tests — a point costs one environment lookup.
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "TAILSCOPE_TEST_FAULT"
_hits: dict[str, int] = {}


def hit(point: str) -> None:
    """Reach ``point``: kill this process or raise ``OSError(ENOSPC)`` when ``$TAILSCOPE_TEST_FAULT`` says so."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    n = _hits[point] = _hits.get(point, 0) + 1
    for item in spec.split(","):
        action, _, rest = item.strip().partition("@")
        where, _, count = rest.partition(":")
        if where != point:
            continue
        times = int(count or 1)
        if action == "kill" and n == times:
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "enospc" and n <= times:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
