"""Read batching of the kernel-stamped connections (kstamp.ReadBatcher over ``_hot.Poller`` / ``kstamp._PollerPy``):
the poller's contract, twin by twin, and the batcher on real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time
from typing import Any

import pytest

from tailscope.client import kstamp
from tailscope.client.http1_pool import ConnectionPool
from tailscope.client.kstamp import ReadBatcher, _PollerPy, read_window_s
from tailscope.testing.judgement import Judgement

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="epoll and SO_TIMESTAMPNS are Linux's"),
    pytest.mark.usefixtures("each_hot_loop"),  # compiled and pure Python (conftest)
]


def _poller() -> Any:
    hot = kstamp._hot.HOT
    return hot.Poller() if hot is not None else _PollerPy()


def _pairs(n: int) -> list[tuple[socket.socket, socket.socket]]:
    out = []
    for _ in range(n):
        a, b = socket.socketpair()
        a.setblocking(False)
        out.append((a, b))
    return out


def _close(pairs: list[tuple[socket.socket, socket.socket]]) -> None:
    for a, b in pairs:
        a.close()
        b.close()


# -- the poller ------------------------------------------------------------------------------------------------------
def test_poll_calls_the_readers_of_ready_sockets_only() -> None:
    p, pairs = _poller(), _pairs(3)
    got: list[tuple[int, bytes]] = []
    try:
        for i, (a, _) in enumerate(pairs):
            p.register(a.fileno(), lambda i=i, a=a: got.append((i, a.recv(100))))
        assert p.poll() == 0
        pairs[0][1].send(b"x")
        pairs[2][1].send(b"yz")
        time.sleep(0.01)
        assert p.poll() == 2
        assert sorted(got) == [(0, b"x"), (2, b"yz")]
        assert p.poll() == 0  # read: no longer ready
    finally:
        p.close()
        _close(pairs)


def test_register_again_replaces_and_unregister_says_whether_it_was_there() -> None:
    p, pairs = _poller(), _pairs(1)
    a, b = pairs[0]
    got: list[str] = []
    try:
        p.register(a.fileno(), lambda: got.append("old") or a.recv(10))
        p.register(a.fileno(), lambda: got.append("new") or a.recv(10))
        b.send(b"x")
        time.sleep(0.01)
        assert p.poll() == 1
        assert got == ["new"]
        assert p.unregister(a.fileno()) is True
        assert p.unregister(a.fileno()) is False
        assert p.unregister(12345) is False
        b.send(b"y")
        time.sleep(0.01)
        assert p.poll() == 0
        assert got == ["new"]
    finally:
        p.close()
        _close(pairs)


def test_a_reader_unregistered_by_an_earlier_one_is_not_called() -> None:
    p, pairs = _poller(), _pairs(2)
    (a, b), (c, d) = pairs
    called: list[str] = []
    try:

        def first() -> None:
            called.append("a")
            a.recv(10)
            p.unregister(c.fileno())

        def second() -> None:
            called.append("c")
            c.recv(10)
            p.unregister(a.fileno())

        p.register(a.fileno(), first)
        p.register(c.fileno(), second)
        b.send(b"1")
        d.send(b"2")
        time.sleep(0.01)
        assert p.poll() == 1
        assert len(called) == 1
    finally:
        p.close()
        _close(pairs)


def test_a_readers_exception_goes_up_and_the_rest_stay_ready() -> None:
    p, pairs = _poller(), _pairs(2)
    read: list[bytes] = []
    try:

        def boom() -> None:
            pairs[0][0].recv(10)
            raise RuntimeError("boom")

        p.register(pairs[0][0].fileno(), boom)
        p.register(pairs[1][0].fileno(), lambda: read.append(pairs[1][0].recv(10)))
        pairs[0][1].send(b"1")
        pairs[1][1].send(b"2")
        time.sleep(0.01)
        for _ in range(3):
            with contextlib.suppress(RuntimeError):
                p.poll()
        assert read == [b"2"]  # read in the same poll or the next
    finally:
        p.close()
        _close(pairs)


def test_a_closed_poller_refuses_work_and_closes_once() -> None:
    p = _poller()
    assert p.fileno() >= 0
    p.close()
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.poll()
    with pytest.raises(ValueError, match="closed"):
        p.fileno()
    with pytest.raises(ValueError, match="closed"):
        p.register(0, lambda: None)


def test_bad_registrations_are_refused() -> None:
    p = _poller()
    try:
        with pytest.raises(ValueError, match="fd"):
            p.register(-1, lambda: None)
        with pytest.raises(TypeError, match="callable"):
            p.register(0, 42)
    finally:
        p.close()


# -- the window ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "want"), [("", kstamp.READ_WINDOW_S), ("0", 0.0), ("500", 0.0005), (" 2000 ", 0.002)])
def test_the_window_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, want: float) -> None:
    monkeypatch.setenv("TAILSCOPE_READ_WINDOW_US", raw)
    assert read_window_s() == pytest.approx(want)


@pytest.mark.parametrize("raw", ["abc", "-5", "nan", "inf"])
def test_a_bad_window_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("TAILSCOPE_READ_WINDOW_US", raw)
    with pytest.raises(ValueError, match="TAILSCOPE_READ_WINDOW_US"):
        read_window_s()


@pytest.mark.parametrize(("window", "batched"), [("0", False), ("1000", True)])
def test_the_pool_batches_kernel_stamped_reads_unless_the_window_is_zero(
    monkeypatch: pytest.MonkeyPatch, window: str, batched: bool
) -> None:
    monkeypatch.setenv("TAILSCOPE_READ_WINDOW_US", window)

    async def go() -> None:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        pool = ConnectionPool("127.0.0.1", lsock.getsockname()[1], None, 5.0, "kernel")
        try:
            await pool.connect()
            assert (pool.read_batcher is not None) is batched
            if pool.read_batcher is not None:
                assert pool.read_batcher._users == 1
                assert pool.read_batcher._watching
        finally:
            pool.close()
            lsock.close()
        if pool.read_batcher is not None:  # every connection closed: the loop watches nothing of the set any more
            assert pool.read_batcher._users == 0
            assert not pool.read_batcher._watching
            assert pool.read_batcher._timer is None

    asyncio.run(go())


# -- the batcher under load, on real sockets -------------------------------------------------------------------------
def _drive(streams: int, gap_s: float, duration_s: float, window_s: float) -> tuple[ReadBatcher, list[int], bool]:
    """``streams`` socket pairs, each written every ``gap_s`` by a thread for ``duration_s``; the batcher reads them.
    Returns the batcher, the bytes read per stream, and whether the set was back on the loop's watch at the end."""

    async def go() -> tuple[ReadBatcher, list[int], bool]:
        loop = asyncio.get_running_loop()
        pairs = _pairs(streams)
        b = ReadBatcher(loop, window_s)
        got = [0] * streams
        for i, (a, _) in enumerate(pairs):

            def reader(i: int = i, a: socket.socket = a) -> None:
                with contextlib.suppress(BlockingIOError):
                    got[i] += len(a.recv(4096))

            b.register(a.fileno(), reader)
        stop = threading.Event()

        def write() -> None:
            end = time.monotonic() + duration_s
            while time.monotonic() < end and not stop.is_set():
                for _, w in pairs:
                    w.send(b"e")
                time.sleep(gap_s)

        t = threading.Thread(target=write, daemon=True)
        t.start()
        try:
            while t.is_alive():
                await asyncio.sleep(0.01)
            for _ in range(100):  # the tail: everything written is read
                if b._watching:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            watching = b._watching
        finally:
            stop.set()
            for a, _ in pairs:
                b.unregister(a.fileno())
            _close(pairs)
        return b, got, watching

    return asyncio.run(go())


def test_many_busy_sockets_are_read_in_batches_and_nothing_is_lost(judgement: Judgement) -> None:
    b, got, watching = _drive(streams=128, gap_s=0.01, duration_s=0.6, window_s=0.001)
    assert min(got) > 0  # every stream read
    assert sum(got) >= b.reads  # every read read something
    assert watching  # quiet again: the loop watches the set
    # ≈ 12,800 reads/s over 128 sockets is past the batching threshold (8 reads per 1-ms window, 4 windows apart);
    # a busy machine's writer thread may not reach that rate, and then there is nothing to judge
    rate = b.reads / 0.6
    if rate * 0.001 < 1.5 * kstamp.BATCH_MIN_READS:
        judgement.cannot_judge(f"the writer reached {rate:,.0f} reads/s, too few to call for batching")
        return
    judgement.holds(b.batched_polls > 0, f"{rate:,.0f} reads/s over 128 sockets, no batching poll")
    judgement.holds(b.reads / b.polls > 1.5, f"{b.reads / b.polls:.2f} reads per wake-up at {rate:,.0f} reads/s")


class _FakeLoop:
    """The loop calls a ReadBatcher makes, recorded; its clock moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readers: dict[int, Any] = {}
        self.timers: list[Any] = []

    def time(self) -> float:
        return self.now

    def add_reader(self, fd: int, cb: Any) -> None:
        self.readers[fd] = cb

    def remove_reader(self, fd: int) -> bool:
        return self.readers.pop(fd, None) is not None

    def call_later(self, delay: float, cb: Any) -> Any:
        loop = self

        class Handle:
            cancelled = False

            def cancel(self) -> None:
                self.cancelled = True
                loop.timers.remove(self)

        h = Handle()
        h.cb = cb  # type: ignore[attr-defined]
        self.timers.append(h)
        return h

    def fire(self) -> None:
        (h,) = self.timers
        self.timers.remove(h)
        h.cb()


class _ScriptedPoller:
    def __init__(self) -> None:
        self.next = 0
        self.fds: set[int] = set()

    def fileno(self) -> int:
        return 99

    def register(self, fd: int, reader: Any) -> None:
        self.fds.add(fd)

    def unregister(self, fd: int) -> bool:
        if fd in self.fds:
            self.fds.remove(fd)
            return True
        return False

    def poll(self) -> int:
        return self.next


def test_the_batcher_switches_between_watching_and_batching_on_the_read_rate() -> None:
    loop = _FakeLoop()
    b = ReadBatcher(loop, 0.001)  # type: ignore[arg-type]
    b._poller.close()
    poller = b._poller = _ScriptedPoller()  # type: ignore[assignment]
    b._fd = poller.fileno()
    for fd in range(100):
        b.register(fd, lambda: None)
    assert list(loop.readers) == [99]
    assert not loop.timers
    # 10 reads per wake-up, a wake-up every 0.5 ms for the first 100 ms: 20,000 reads/s, 20 per window
    poller.next = 10
    for _ in range(200):
        loop.now += 0.0005
        loop.readers[99]()
        if not loop.readers:
            break
    assert not loop.readers
    assert len(loop.timers) == 1
    for _ in range(5):
        loop.now += 0.001
        loop.fire()
    assert b.batched_polls == 5
    assert len(loop.timers) == 1
    # the rate falls (one read per window): at the next re-measure the set goes back to the loop's watch
    poller.next = 1
    for _ in range(200):
        loop.now += 0.001
        loop.fire()
        if loop.readers:
            break
    assert list(loop.readers) == [99]
    assert not loop.timers
    # a spread too thin — 20 reads per window over 40 sockets (each read every 2 windows): no batching
    for fd in range(40, 100):
        b.unregister(fd)
    poller.next = 10
    loop.now += 1.0
    for _ in range(400):
        loop.now += 0.0005
        loop.readers[99]()
    assert list(loop.readers) == [99]
    assert not loop.timers
    # the last socket leaves: nothing watched, no timer
    for fd in range(40):
        b.unregister(fd)
    assert not loop.readers
    assert not loop.timers


def test_few_fast_sockets_are_read_as_they_come() -> None:
    # 2 sockets written every 2 ms: each would be read less than 4 windows apart — batching stays off
    b, got, watching = _drive(streams=2, gap_s=0.002, duration_s=0.4, window_s=0.001)
    assert min(got) > 0
    assert b.batched_polls == 0
    assert watching


def test_a_readers_exception_is_reported_and_the_loop_goes_on() -> None:
    async def go() -> tuple[list[dict[str, Any]], list[bytes]]:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        pairs = _pairs(2)
        b = ReadBatcher(loop, 0.001)
        read: list[bytes] = []

        def boom() -> None:
            pairs[0][0].recv(10)
            raise RuntimeError("boom")

        b.register(pairs[0][0].fileno(), boom)
        b.register(pairs[1][0].fileno(), lambda: read.append(pairs[1][0].recv(10)))
        try:
            pairs[0][1].send(b"1")
            pairs[1][1].send(b"2")
            for _ in range(100):
                if read and errors:
                    break
                await asyncio.sleep(0.005)
        finally:
            for a, _ in pairs:
                b.unregister(a.fileno())
            _close(pairs)
        return errors, read

    errors, read = asyncio.run(go())
    assert read == [b"2"]
    assert len(errors) == 1
    assert isinstance(errors[0]["exception"], RuntimeError)
