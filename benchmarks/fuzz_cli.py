"""Fuzz the `tailscope bench` command line: N random flag/profile combinations through the real CLI entry against
one live built-in engine (tailscope.testing.fuzz_cli draws and judges them).

Cases run in-process (so thousands are affordable) through the function the installed `tailscope` command runs, its
console-script entry looked up in the package metadata, in --jobs worker processes (a case mostly waits on its short
run, so jobs overlap well even on 2 cores), each with its own store and seed; every --subprocess-every'th case runs
through a real `python -m tailscope` instead. A case breaks the property when it exits with an undocumented code,
prints a traceback or an internal error, or is refused without exactly one error line; every store must open every
--check-every cases and at the end. Prints the cases, exit codes, refusals by kind, problems (with their command
lines), unreadable-store checks, wall time, cases/s and the load average.

    .venv/bin/python benchmarks/fuzz_cli.py --cases 6000 --jobs 3
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tailscope.testing.builtin_server import built_in_server
from tailscope.testing.fuzz_bench import store_readable
from tailscope.testing.fuzz_cli import CaseTimeout, draw_cli_case, run_cli_case, run_cli_subprocess

#: a case still running after this long is a hang (a problem), interrupted so that the run goes on
CASE_LIMIT_S = 120


def console_entry() -> Callable[[list[str]], object]:
    """The function the ``tailscope`` console script runs (``[project.scripts]``), loaded from the installed
    package's metadata — the command line's public entry, without importing the CLI's modules by name."""
    found = entry_points(group="console_scripts", name="tailscope")
    if not found:
        raise SystemExit("no `tailscope` console script: install the package (pip install -e .) and run again")
    main: Callable[[list[str]], object] = next(iter(found)).load()
    return main


def run_chunk(
    job: int, cases: int, seed: int, url: str, check_every: int, subprocess_every: int, max_seconds: float
) -> dict[str, Any]:
    """``cases`` cases drawn from ``(seed, job)`` against ``url`` with a store of their own (fewer when
    ``max_seconds`` runs out first); the counts."""
    rng = random.Random(f"{seed}:{job}")

    def overran(signum: int, frame: object) -> None:
        raise CaseTimeout(f"still running after {CASE_LIMIT_S} s (every case is bounded to about a second)")

    signal.signal(signal.SIGALRM, overran)
    cli_main = console_entry()
    codes: collections.Counter[int | None] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    unreadable = checks = subprocesses = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "fuzz.duckdb"
        for i in range(cases):
            if time.perf_counter() - t0 > max_seconds:
                break
            case = draw_cli_case(rng, url=url, store=store, workdir=work)
            if subprocess_every and i % subprocess_every == subprocess_every - 1:
                out = run_cli_subprocess(case, work)
                subprocesses += 1
            else:
                signal.alarm(CASE_LIMIT_S)  # a hang is a finding, not the end of the run
                try:
                    out = run_cli_case(case, work, cli_main)
                finally:
                    signal.alarm(0)
            codes[out.code] += 1
            if out.refusal:
                refused[out.refusal] += 1
            if out.problem:
                problems.append(f"job {job} case {i}: {out.problem}: {case.describe()}\n    {out.stderr[-600:]!r}")
                print("PROBLEM (as found)", problems[-1], flush=True)
            if i % check_every == check_every - 1:
                checks += 1
                unreadable += store_readable(store) is not None
            if i % 250 == 249:
                print(f"  job {job}: {i + 1:,} cases, {time.perf_counter() - t0:,.0f} s, {len(problems)} problems",
                      flush=True)  # fmt: skip
        checks += 1
        unreadable += store_readable(store) is not None
    return {"done": sum(codes.values()), "codes": codes, "refused": refused, "problems": problems,
            "unreadable": unreadable, "checks": checks,
            "subprocesses": subprocesses}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=6_000)
    ap.add_argument("--jobs", type=int, default=3, help="worker processes, each with its own store")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-every", type=int, default=200, help="check the store opens every N cases")
    ap.add_argument("--subprocess-every", type=int, default=100, help="run every Nth case in a real process")
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="stop drawing cases after this long")
    ap.add_argument("--speed", type=float, default=50.0, help="the built-in engine's speed (× real time)")
    a = ap.parse_args()
    codes: collections.Counter[int | None] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    unreadable = checks = subprocesses = done = 0
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    per_job = [a.cases // a.jobs + (1 if j < a.cases % a.jobs else 0) for j in range(a.jobs)]
    with built_in_server(speed=a.speed) as url, concurrent.futures.ProcessPoolExecutor(a.jobs) as pool:
        futures = [
            pool.submit(run_chunk, j, n, a.seed, url, a.check_every, a.subprocess_every, a.max_seconds)
            for j, n in enumerate(per_job)
        ]
        for f in futures:
            r = f.result()
            done += r["done"]
            codes.update(r["codes"])
            refused.update(r["refused"])
            problems += r["problems"]
            unreadable += r["unreadable"]
            checks += r["checks"]
            subprocesses += r["subprocesses"]
    wall = time.perf_counter() - t0
    shown = ", ".join(f"{k}: {n:,}" for k, n in sorted(codes.items(), key=lambda kv: str(kv[0])))
    print(
        f"cases {done:,} of {a.cases:,} in {a.jobs} jobs ({subprocesses:,} in a real process)  exit codes {{{shown}}}  "
        f"problems {len(problems)}  tracebacks {sum('traceback' in p or 'internal error' in p for p in problems)}  "
        f"hangs {sum('a hang' in p for p in problems)}  "
        f"unreadable-store checks {unreadable}/{checks}  {wall:,.0f} s ({done / wall:.1f} cases/s)"
    )
    print(f"load average (1 min) at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    print(f"refusals by kind ({len(refused):,} kinds; the most common):")
    for words, n in refused.most_common(25):
        print(f"  {n:6,}  {words}")
    for line in problems[:30]:
        print("PROBLEM", line)


if __name__ == "__main__":
    main()
