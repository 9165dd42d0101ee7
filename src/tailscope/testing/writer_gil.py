"""How long another thread waits for the GIL while the store's writer thread journals a batch of records — an
internal measurement (it drives the writer's private tick), so it lives here, not in the public API;
``benchmarks/writer_gil.py`` prints it."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from tailscope.records import RequestRecord, Run, RunKind, Status, Target, TokensSource
from tailscope.store.db import Database
from tailscope.store.runs import RunStore
from tailscope.store.writer import RecordWriter

__all__ = ["writer_tick_lateness"]


def _record(i: int) -> RequestRecord:
    first = i + 50_000_000
    return RequestRecord(
        id=i,
        scheduled_ns=i,
        sent_ns=i,
        first_token_ns=first,
        end_ns=first + 2_550_000_000,
        status=Status.OK,
        input_tokens=64,
        output_tokens=256,
        requested_output_tokens=256,
        tokens_source=TokensSource.USAGE,
        chunk_times_ns=tuple(first + 10_000_000 * k for k in range(256)),
        chunk_tokens=(1,) * 256,
    )


def writer_tick_lateness(records: int, yield_gil: bool) -> tuple[int, float, float]:
    """(wake-ups, p99 ms late, max ms late) of the sleeping thread during one writer tick."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "s.duckdb")
        RunStore(db).create_run(
            Run(
                id="r",
                kind=RunKind.BENCH,
                tool_version="0",
                started_at="2026-12-04T00:00:00.000Z",
                target=Target(url="http://127.0.0.1:1", model="m"),
                seed=0,
            )
        )
        w = RecordWriter(db, "r", flush_interval_s=3600)
        for i in range(records):
            w.add(_record(i))
        done = threading.Event()

        def tick() -> None:
            w._journal_tick(yield_gil=yield_gil)
            done.set()

        late: list[float] = []
        t = threading.Thread(target=tick)
        t.start()
        while not done.is_set():
            t0 = time.perf_counter()
            time.sleep(0.0002)
            late.append((time.perf_counter() - t0 - 0.0002) * 1e3)
        t.join()
        w.close()
    late.sort()
    return len(late), late[int(0.99 * (len(late) - 1))], late[-1]
