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

from tailscope.testing.writer_gil import writer_tick_lateness


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for _ in range(a.repeat):
        for yield_gil in (False, True):
            n, p99, mx = writer_tick_lateness(a.records, yield_gil)
            print(
                f"yield {'on ' if yield_gil else 'off'}: {n:4d} wake-ups during a {a.records}-record tick, "
                f"late p99 {p99:.2f} ms, max {mx:.2f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
