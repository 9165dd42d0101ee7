"""How long a run's event-loop thread waits for the GIL while the store's writer thread journals a batch of records.

The writer encodes finished records (≈ 50 µs each) on its own thread. Holding the GIL for a whole tick, it made the
loop thread wait out the interpreter's switch interval (5 ms) at each turn; it now hands the GIL back after each
record (``RecordWriter._journal_tick(yield_gil=True)``, what its background loop does). This prints, for one tick of
``--records`` 256-token records each way, how often a thread sleeping 0.2 ms at a time (the loop's stand-in) woke up
during the tick and how late (p99, max).

    .venv/bin/python benchmarks/writer_gil.py --records 512 --repeat 3
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from tailscope.records import RequestRecord, Run, RunKind, Status, Target, TokensSource
from tailscope.store.db import Database
from tailscope.store.runs import RunStore
from tailscope.store.writer import RecordWriter


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


def one_tick(records: int, yield_gil: bool) -> tuple[int, float, float]:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for _ in range(a.repeat):
        for yield_gil in (False, True):
            n, p99, mx = one_tick(a.records, yield_gil)
            print(
                f"yield {'on ' if yield_gil else 'off'}: {n:4d} wake-ups during a {a.records}-record tick, "
                f"late p99 {p99:.2f} ms, max {mx:.2f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
