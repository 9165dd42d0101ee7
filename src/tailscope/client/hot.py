"""Which hot loop the client runs: the compiled one (``tailscope.client._hot``, built from ``_hot.c`` at install where
a C compiler is present) or its pure-Python twins, which stay the reference.

The compiled functions are drop-in twins — same arguments, same results, same exceptions — of
``http1_conn._push_frames_py``, ``Http1Connection.data_received_at``, ``openai._consume_py``, the per-piece step of
``openai.push_handler``'s closure, ``kstamp._recv_stamped_py``, ``RealtimeMap.stamp`` and ``kstamp._PollerPy`` (the
modules bind one or the other at import where a function is called from Python; ``_recv_stamped_py`` and ``stamp``
run inside the callables). Two are callable objects: ``Reader`` is ``KernelStampTransport._read_ready`` whole (read,
stamp, frame, account: the loop — or the ``Poller``, which calls it for each ready socket of a batch — calls it with
no Python frame in between) and ``Sink`` is ``execute``'s push-mode handler (``on_data``).
``TAILSCOPE_HOT_LOOP=python`` forces the pure-Python ones (a comparison, a suspected difference). A build of another
ABI, or one compiled from another revision of ``_hot.c`` (an in-place build left from before a change), is not used.
docs/metrics.md, "The compiled hot loop".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

#: the ABI this Python side expects of ``_hot`` (HOT_ABI in _hot.c)
ABI = 5


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("TAILSCOPE_HOT_LOOP", "").lower() == "python":
        return None, "TAILSCOPE_HOT_LOOP=python"
    try:
        from tailscope.client import _hot  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"not built ({exc})"
    if getattr(_hot, "ABI", None) != ABI:
        return None, f"built for ABI {getattr(_hot, 'ABI', None)}, this code needs {ABI}: reinstall"
    src = Path(__file__).with_name("_hot.c")
    digest = getattr(_hot, "DIGEST", "")
    if src.exists() and digest and hashlib.sha256(src.read_bytes()).hexdigest()[:16] != digest:
        return None, "built from another revision of _hot.c: reinstall (make setup)"
    return _hot, "compiled"  # tailscope.client.openai configures it with its exception classes


HOT, WHY = _load()


def hot_loop() -> str:
    """``compiled`` when the compiled hot loop runs, else ``python`` (what a run's summary reports)."""
    return "compiled" if HOT is not None else "python"


@contextlib.contextmanager
def forced(kind: str) -> Iterator[None]:
    """Run the block with the ``compiled`` or the ``python`` hot loop bound in this process's client (a benchmark's
    side-by-side rows, a comparison); ``compiled`` where it is not built raises ``RuntimeError``. Not for concurrent
    use: it rebinds module globals (worker processes take ``TAILSCOPE_HOT_LOOP`` from the environment instead)."""
    global HOT
    from tailscope.client import http1_conn, kstamp, openai

    if kind not in ("compiled", "python"):
        raise ValueError(f"hot loop {kind!r}: compiled or python")
    mod = sys.modules.get("tailscope.client._hot") if kind == "compiled" else None
    if kind == "compiled" and (mod is None or WHY != "compiled"):
        raise RuntimeError(f"the compiled hot loop is not in use here: {WHY}")
    names = ((http1_conn, "_push_frames"), (http1_conn, "_receive"), (openai, "_consume"), (kstamp, "_recv_stamped"))
    saved = (HOT, *(getattr(m, n) for m, n in names))
    HOT = mod  # the connection's reader and the request's handler are chosen by HOT as they are made
    if mod is None:
        bound = (http1_conn._push_frames_py, http1_conn.Http1Connection.data_received_at, openai._consume_py,
                 kstamp._recv_stamped_py)  # fmt: skip
    else:
        bound = (mod.push, mod.receive, mod.consume, mod.recv_stamped)
    for (m, n), f in zip(names, bound, strict=True):
        setattr(m, n, f)
    try:
        yield
    finally:
        HOT = saved[0]
        for (m, n), f in zip(names, saved[1:], strict=True):
            setattr(m, n, f)
