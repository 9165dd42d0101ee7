"""Where a fresh process's time goes in ``tailscope sim --db … --json`` (an internal profile for
``benchmarks/sim_speed.py``, with no meaning to a user of the library: it times private steps by wrapping them).

    python -m tailscope.testing.sim_phases DB_PATH EXPORT_PATH

Prints one line per step, ``SECONDS LABEL``: the imports, creating the run, the columnar insert and commit, the
summary, finishing the run, closing the DuckDB instance held from the last insert to the finish, the simulation
loop, the export and the rest of :func:`tailscope.simulate`.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import sys  # noqa: E402 - the imports are what is timed first
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import tailscope.api.sim as api  # noqa: E402
import tailscope.metrics.summary as ms  # noqa: E402
from tailscope.store.db import Database  # noqa: E402
from tailscope.store.runs import RunStore  # noqa: E402

__all__ = ["main"]

_IMPORTS = time.perf_counter() - _T0


def main(argv: list[str]) -> dict[str, float]:
    """Run the issue-23 workload with the store at ``argv[0]`` and its export to ``argv[1]``; each step's seconds."""
    db, js = argv
    times: dict[str, float] = {"imports (tailscope.api.sim, store, export)": _IMPORTS}

    def timed(owner: Any, name: str, label: str) -> None:
        f: Callable[..., Any] = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                times[label] = times.get(label, 0.0) + time.perf_counter() - t

        setattr(owner, name, wrapper)

    timed(ms, "summarize", "summary (summarize)")
    timed(RunStore, "create_run", "store: create the run (duckdb import, schema)")
    timed(RunStore, "write_records_bulk", "store: records + samples (columnar insert, commit)")
    timed(RunStore, "finish_run", "store: finish the run")
    timed(Database, "release", "store: close the held instance (its checkpoint)")
    t = time.perf_counter()
    out = api.simulate(model="llama-3.1-8b", gpu="h100-sxm", rate=20, requests=10000, input_tokens="1024",
                       output_tokens="256", seed=0, store=db)  # fmt: skip
    total = time.perf_counter() - t
    times["simulation loop"] = out.sim.wall_s
    t = time.perf_counter()
    with Path(js).open("wb") as f:
        for chunk in out.export_chunks():
            f.write(chunk)
    times["export (--json, streamed)"] = time.perf_counter() - t
    times["rest of simulate() (workload, interval, …)"] = total - sum(
        v for k, v in times.items() if k.startswith(("summary", "store", "simulation"))
    )
    return times


if __name__ == "__main__":
    for label, seconds in main(sys.argv[1:]).items():
        print(f"{seconds:.3f} {label}")
