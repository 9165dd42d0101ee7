"""Kernel receive timestamps for the raw HTTP/1.1 transport (``arrival_stamp="kernel"``, Linux, plain TCP).

Why: a token's arrival stamped in user space (``perf_counter_ns`` in ``data_received``) includes any time the event
loop spent elsewhere before it read the socket — other streams, the store writer, GC. With ``SO_TIMESTAMPNS`` the
kernel records when the last segment of each read reached the host, and ``recvmsg`` returns it as an
``SCM_TIMESTAMPNS`` control message (``CLOCK_REALTIME``). asyncio's transports call ``recv`` themselves, so this
module has its own small transport: a non-blocking socket read with ``loop.add_reader`` + ``recvmsg``.

The realtime stamp is mapped onto ``perf_counter_ns`` with an offset re-measured every :data:`RESYNC_NS` (NTP slews
realtime by at most 500 ppm: ≤ 0.5 µs over 1 s), and clamped: never later than the ``perf_counter_ns`` read taken
right after ``recvmsg``, never earlier than the request's send. Where the control message is missing (the option
refused, not Linux) or a clamp fires, the read keeps the user-space stamp.

Limit: several events coalesced in one read share the stamp of the read's last segment.

Read batching: since the kernel's stamp does not move with the time the read is done, the connections of one pool
are not each watched by the event loop. They sit in an epoll set of their own (:class:`ReadBatcher`), which the loop
watches as one descriptor: a socket that becomes readable is read at once. Under load — at least
:data:`BATCH_MIN_READS` reads per window, spread so that each socket is read at most once per :data:`BATCH_SPREAD`
windows on average — the loop stops watching and every ready socket is read together once per
:data:`READ_WINDOW_S` — one loop wake-up for many reads instead of one per read (the wake-up, not the read, was most
of a token event's CPU: docs/scale-out.md, "Read batching"). A socket then waits at most about a window before it is
read, so only events of one stream less than about a window apart can end in one read (and share its stamp); the
spread rule keeps batching off where a stream's events come that fast. ``TAILSCOPE_READ_WINDOW_US`` sets the window
(``0``: every socket watched by the loop on its own, read as it is ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tailscope.client import hot as _hot
from tailscope.client.hot import HOT
from tailscope.client.http1_conn import Http1Connection
from tailscope.clock import MonotonicClock, unix_offset_ns

#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; the "old" 64-bit-time_t form on 64-bit hosts: a struct timespec)
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
_ANCBUF = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: bytes asked of one ``recvmsg``. Python allocates the whole size for every call before shrinking it to what came:
#: at 256 KiB that allocation is past glibc's mmap threshold (a send and a read of 400 bytes on a socketpair:
#: 14.6–16.0 µs, against 3.1–3.5 µs at 16–128 KiB; in a whole bench the difference was inside the run-to-run spread)
_READ = 64 * 1024
#: the realtime → perf_counter offset is re-measured this often (per clock map, i.e. per connection pool)
RESYNC_NS = 500_000_000
#: while reads keep coming, the kernel-stamped sockets are read together once per this window (module docstring);
#: 1 ms is the timer resolution of uvloop (libuv), the loop a bench runs on
READ_WINDOW_S = 0.001
#: batching needs at least this many reads per window (the rate measured over the last ~100 ms): fewer gain nothing
BATCH_MIN_READS = 8
#: ... and at least this many windows between two reads of a socket on average (registered sockets / reads per window)
BATCH_SPREAD = 4
#: how often the read rate that decides batching is re-measured (s)
_RATE_SPAN_S = 0.1


def read_window_s() -> float:
    """The read-batching window in seconds: ``TAILSCOPE_READ_WINDOW_US`` (µs; ``0`` turns batching off), else
    :data:`READ_WINDOW_S`. A value that is not a number ≥ 0 raises ``ValueError`` naming the variable."""
    raw = os.environ.get("TAILSCOPE_READ_WINDOW_US", "").strip()
    if not raw:
        return READ_WINDOW_S
    try:
        us = float(raw)
    except ValueError:
        us = -1.0
    if not us >= 0 or us == float("inf"):
        raise ValueError(f"TAILSCOPE_READ_WINDOW_US={raw!r}: give microseconds >= 0 (0 turns read batching off)")
    return us / 1e6


def _recv_stamped_py(sock: socket.socket, fd: int, size: int) -> tuple[bytes, int | None, int] | None:
    """One ``recvmsg`` of up to ``size`` bytes on the non-blocking socket ``sock`` (``fd`` is its ``fileno()``, which
    the compiled twin ``_hot.recv_stamped`` reads from): ``(data, the SCM_TIMESTAMPNS stamp in realtime ns or None,
    perf_counter_ns right after the read)``; ``None`` when nothing is there (EAGAIN, EINTR); ``b""`` data at EOF; the
    ``OSError`` of a reset raised."""
    try:
        data, anc, _, _ = sock.recvmsg(size, _ANCBUF)
    except (BlockingIOError, InterruptedError):
        return None
    read_ns = time.perf_counter_ns()
    rt: int | None = None
    for level, kind, cdata in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(cdata)
            rt = sec * 1_000_000_000 + nsec
    return data, rt, read_ns


_recv_stamped: Callable[[socket.socket, int, int], tuple[bytes, int | None, int] | None] = (
    HOT.recv_stamped if HOT is not None else _recv_stamped_py
)


class _PollerPy:
    """An epoll set of sockets, each with the reader :meth:`poll` calls when it is readable (the pure-Python twin of
    ``_hot.Poller``)."""

    __slots__ = ("_ep", "_readers")

    def __init__(self) -> None:
        self._ep: select.epoll | None = select.epoll()
        self._readers: dict[int, Callable[[], object]] = {}

    def _open(self) -> select.epoll:
        if self._ep is None:
            raise ValueError("Poller is closed")
        return self._ep

    def fileno(self) -> int:
        """The epoll descriptor (readable while a registered socket is)."""
        return self._open().fileno()

    def register(self, fd: int, reader: Callable[[], object]) -> None:
        """``reader()`` is called by :meth:`poll` whenever ``fd`` is readable (again: a new reader replaces the
        old)."""
        ep = self._open()
        if fd < 0:
            raise ValueError("register: fd out of range")
        if not callable(reader):
            raise TypeError("register: reader must be callable")
        if fd in self._readers:
            ep.modify(fd, select.EPOLLIN)
        else:
            try:
                ep.register(fd, select.EPOLLIN)
            except FileExistsError:
                ep.modify(fd, select.EPOLLIN)
        self._readers[fd] = reader

    def unregister(self, fd: int) -> bool:
        """Forget ``fd``; True when it was registered (a closed fd is fine: the kernel dropped it already)."""
        if self._readers.pop(fd, None) is None:
            return False
        if self._ep is not None:
            with contextlib.suppress(FileNotFoundError, OSError):
                self._ep.unregister(fd)
        return True

    def poll(self) -> int:
        """Call the reader of every socket readable now (no wait); the number called. A reader's exception stops the
        poll and goes up; the sockets not yet read stay readable for the next poll."""
        called = 0
        for fd, _ in self._open().poll(0, 1024):
            reader = self._readers.get(fd)
            if reader is None:  # unregistered by an earlier reader of this poll
                continue
            reader()
            called += 1
        return called

    def close(self) -> None:
        """Forget every reader and close the epoll descriptor (idempotent)."""
        self._readers.clear()
        if self._ep is not None:
            self._ep.close()
            self._ep = None


class ReadBatcher:
    """The kernel-stamped connections of one pool, read in batches under load (module docstring, "Read batching").

    The loop watches the set's epoll descriptor, and a socket that becomes readable is read at once (with any other
    ready one). While the read rate (re-measured every 100 ms) is at least :data:`BATCH_MIN_READS` per window and at
    most one read per socket per :data:`BATCH_SPREAD` windows, the loop stops watching and polls the set once per
    ``window_s`` instead, for as long as that holds; then the set is handed back to the loop's watch.

    Args:
        loop: the running loop.
        window_s: the batching window (> 0).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, window_s: float) -> None:
        hot = _hot.HOT
        self._poller = hot.Poller() if hot is not None else _PollerPy()
        self._loop = loop
        self._fd = self._poller.fileno()
        self.window_s = window_s
        self._users = 0
        self._watching = False
        self._timer: asyncio.TimerHandle | None = None
        self._mark_t = loop.time()
        self._mark_reads = 0
        self._rate = 0.0  # reads per second, over the last measured span
        #: wake-ups that read something, the reads they did, and how many of those were batching polls
        self.polls = 0
        self.reads = 0
        self.batched_polls = 0

    def register(self, fd: int, reader: Callable[[], object]) -> None:
        """Read ``fd`` with ``reader()`` whenever it is readable."""
        self._poller.register(fd, reader)
        self._users += 1
        if not self._watching and self._timer is None:
            self._watch()

    def unregister(self, fd: int) -> None:
        """Stop reading ``fd`` (idempotent); with no socket left, the loop no longer watches the set."""
        if self._poller.unregister(fd):
            self._users -= 1
        if self._users == 0:
            if self._watching:
                self._loop.remove_reader(self._fd)
                self._watching = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _watch(self) -> None:
        self._loop.add_reader(self._fd, self._ready)
        self._watching = True

    def _batching(self) -> bool:
        """Whether to batch from here: the read rate is high and spread over many sockets."""
        now = self._loop.time()
        span = now - self._mark_t
        if span >= _RATE_SPAN_S:
            self._rate = (self.reads - self._mark_reads) / span
            self._mark_t, self._mark_reads = now, self.reads
        per_window = self._rate * self.window_s
        return per_window >= BATCH_MIN_READS and per_window * BATCH_SPREAD <= self._users

    def _ready(self) -> None:  # the loop saw the set readable: read now
        self._poll()
        if self._watching and self._timer is None and self._users and self._batching():
            self._loop.remove_reader(self._fd)
            self._watching = False
            self._timer = self._loop.call_later(self.window_s, self._tick)

    def _tick(self) -> None:  # a batching window is over: read what came in it
        self._timer = None
        if self._poll():
            self.batched_polls += 1
        if self._users == 0 or self._timer is not None or self._watching:
            return  # every socket left, or a reader's call re-armed the set
        if self._batching():
            self._timer = self._loop.call_later(self.window_s, self._tick)
        else:
            self._watch()

    def _poll(self) -> int:
        try:
            n = self._poller.poll()
        except Exception as exc:  # as the loop treats a reader callback's exception: reported, the loop goes on
            self._loop.call_exception_handler(
                {"message": "exception in a kernel-stamped socket's reader", "exception": exc}
            )
            return 0  # the sockets not read yet are still ready: the next wake-up reads them
        if n:
            self.polls += 1
            self.reads += n
        return n


class StampedProtocol(Protocol):
    """What the kernel-stamped transport needs of its protocol (``Http1Connection`` is one)."""

    sent_ns: int

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def data_received_at(self, data: bytes, arrival_ns: int) -> None: ...


class RealtimeMap:
    """Maps a ``CLOCK_REALTIME`` ns stamp to the ``perf_counter_ns`` domain, re-measuring the offset every
    ``resync_ns``; counts how reads were stamped (``kernel``, ``user``: no control message, ``clamped``).

    Args:
        offset_ns: measures realtime minus perf_counter, ns (scripted in tests; ``unix_offset_ns`` otherwise).
        resync_ns: how often the offset is re-measured, on the reads' ``perf_counter_ns`` clock.
    """

    __slots__ = ("_offset", "clamped", "kernel", "next_sync_ns", "offset_ns", "resync_ns", "user")

    def __init__(
        self,
        offset_ns: Callable[[], int] | None = None,
        resync_ns: int = RESYNC_NS,
    ) -> None:
        self._offset = offset_ns or (lambda: unix_offset_ns(MonotonicClock(), tries=3))
        self.resync_ns = resync_ns
        self.offset_ns = 0
        self.next_sync_ns = -1
        self.kernel = self.user = self.clamped = 0

    def stamp(self, realtime_ns: int | None, read_ns: int, floor_ns: int) -> int:
        """The arrival stamp of one read: the kernel's, mapped, when it lies in ``[floor_ns, read_ns]``;
        ``read_ns`` (the user-space stamp) otherwise.

        Args:
            realtime_ns: the ``SCM_TIMESTAMPNS`` value, or ``None`` when the read carried none.
            read_ns: ``perf_counter_ns`` taken right after the read.
            floor_ns: the request's send (``perf_counter_ns``); nothing of its answer can arrive earlier.
        """
        if realtime_ns is None:
            self.user += 1
            return read_ns
        if read_ns >= self.next_sync_ns:
            self.offset_ns = self._offset()
            self.next_sync_ns = read_ns + self.resync_ns
        t = realtime_ns - self.offset_ns
        if t > read_ns or t < floor_ns:
            self.clamped += 1
            return read_ns
        self.kernel += 1
        return t


def kernel_stamps_supported() -> bool:
    """True on Linux, where ``SO_TIMESTAMPNS`` and ``recvmsg`` control messages exist."""
    return sys.platform.startswith("linux") and _ANCBUF > 0


#: how a network read's arrival is stamped (``--arrival-stamp``; docs/metrics.md, "Arrival")
ARRIVAL_STAMPS = ("auto", "user", "kernel")


def resolve_arrival_stamp(requested: str, *, http_client: str, url: str | None) -> str:
    """What a run's reads are stamped with: ``kernel`` where it was asked for (``kernel``, or the default ``auto``)
    and is possible — the raw client, plain HTTP (``url`` ``None`` is the built-in engine on loopback), Linux —
    else ``user``. An explicit ``kernel`` that is not possible is the caller's error to report."""
    if requested == "user" or http_client != "raw" or not kernel_stamps_supported():
        return "user"
    return "user" if url is not None and url.lower().startswith("https:") else "kernel"


class KernelStampTransport(asyncio.Transport):
    """A plain-TCP transport that reads with ``recvmsg`` and hands ``(data, arrival_ns)`` to its protocol.

    Matches what ``Http1Connection`` expects of asyncio's transport: EOF and resets end in ``connection_lost``
    (``None`` on EOF, the ``OSError`` on a reset); ``write`` never blocks (a partial send is buffered and finished
    when the socket is writable); ``close`` flushes then closes, ``abort`` closes at once. No write flow control
    (``pause_writing``): a request is written once and is small.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        clock: RealtimeMap,
        batcher: ReadBatcher | None = None,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._batcher = batcher
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._clock = clock
        self._wbuf = bytearray()
        self._closing = False
        self._lost = False
        self._extra = {"socket": sock, "peername": _peer(sock), "sockname": sock.getsockname()}
        protocol.connection_made(self)
        hot = _hot.HOT
        reader: Callable[[], object]
        if hot is None:
            reader = self._read_ready
        else:  # the compiled twin of _read_ready (with Http1Connection's fast path inside)
            http1 = type(protocol).data_received_at is Http1Connection.data_received_at
            reader = hot.Reader(self, self._fd, _READ, protocol, clock, http1)
        if batcher is None:
            loop.add_reader(self._fd, reader)
        else:
            batcher.register(self._fd, reader)

    def _stop_reading(self) -> None:
        if self._batcher is None:
            self._loop.remove_reader(self._fd)
        else:
            self._batcher.unregister(self._fd)

    # -- reading -------------------------------------------------------------------------------------------------
    def _read_ready(self) -> None:
        try:
            got = _recv_stamped(self._sock, self._fd, _READ)
        except OSError as exc:  # a reset: asyncio's transport reports it the same way
            self._force_close(exc)
            return
        if got is None:
            return
        data, rt, read_ns = got
        if not data:  # EOF: Http1Connection does not keep half-open connections
            self._force_close(None)
            return
        self._protocol.data_received_at(data, self._clock.stamp(rt, read_ns, self._protocol.sent_ns))

    # -- writing -------------------------------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._lost:
            return
        if not self._wbuf:
            try:
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._force_close(exc)
                return
            if n == len(data):
                return
            self._wbuf += memoryview(data)[n:]
            self._loop.add_writer(self._fd, self._write_ready)
        else:
            self._wbuf += data

    def _write_ready(self) -> None:
        try:
            n = self._sock.send(self._wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._force_close(exc)
            return
        del self._wbuf[:n]
        if not self._wbuf:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._force_close(None)

    def get_write_buffer_size(self) -> int:
        return len(self._wbuf)

    def can_write_eof(self) -> bool:
        return False

    # -- closing -------------------------------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing or self._lost

    def close(self) -> None:
        if self._closing or self._lost:
            return
        self._closing = True
        self._stop_reading()
        if not self._wbuf:
            self._force_close(None)

    def abort(self) -> None:
        self._force_close(None)

    def _force_close(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = self._closing = True
        self._stop_reading()
        if self._wbuf:
            self._wbuf.clear()
            self._loop.remove_writer(self._fd)
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def get_protocol(self) -> Any:
        return self._protocol

    def is_reading(self) -> bool:
        return not self.is_closing()


P = TypeVar("P", bound=StampedProtocol)


def _peer(sock: socket.socket) -> Any:
    try:
        return sock.getpeername()
    except OSError:
        return None


async def open_kernel_stamped(
    loop: asyncio.AbstractEventLoop,
    protocol_factory: Callable[[], P],
    addr: tuple[Any, ...],
    family: int,
    clock: RealtimeMap,
    batcher: ReadBatcher | None = None,
) -> tuple[KernelStampTransport, P]:
    """Connect a non-blocking TCP socket to ``addr`` with ``SO_TIMESTAMPNS`` on (when the kernel accepts it) and
    wrap it (its reads batched by ``batcher`` when given); ``TCP_NODELAY`` as asyncio sets it. Raises the
    ``OSError`` of a failed connect."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(OSError):  # refused: no control messages, every read keeps the user-space stamp
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        await loop.sock_connect(sock, addr)
    except BaseException:
        sock.close()
        raise
    proto = protocol_factory()
    return KernelStampTransport(loop, sock, proto, clock, batcher), proto
