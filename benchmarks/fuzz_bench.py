"""Fuzz whole bench runs: N random option/profile combinations against a live built-in engine.

Every case must run or be refused with a tailscope.TailscopeError that says what to do; an unexpected exception (an
InternalError from the API) or a store that stops opening is a bug, printed with its case. Prints how many cases ran,
how many were refused (by the first words of their messages) and how long it took.

    .venv/bin/python benchmarks/fuzz_bench.py --cases 10000
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import tempfile
import time
from pathlib import Path

import tailscope
from tailscope.testing.builtin_server import built_in_server
from tailscope.testing.fuzz_bench import draw_case, store_readable
from tailscope.testing.fuzz_cli import refusal_kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="stop drawing cases after this long")
    ap.add_argument("--check-every", type=int, default=200, help="check the store opens every N cases")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ran = 0
    refused: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    unreadable = 0
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, built_in_server(speed=50.0) as url:
        work = Path(tmp)
        store = work / "fuzz.duckdb"
        done = 0
        for i in range(a.cases):
            if time.perf_counter() - t0 > a.max_seconds:
                break
            done += 1
            case = draw_case(rng)
            kwargs = dict(case.kwargs)
            if case.profile is not None:
                (work / "profile.yaml").write_text(case.profile)
                kwargs["profile"] = work / "profile.yaml"
            try:
                tailscope.bench(url, metrics_url="off", store=store, **kwargs)
                ran += 1
            except tailscope.InternalError as exc:
                bad.append(f"case {i}: {exc} — {case}")
                print("UNEXPECTED (as found)", bad[-1], flush=True)
            except tailscope.TailscopeError as exc:
                refused[refusal_kind("tailscope: error: " + str(exc))] += 1
            except Exception as exc:  # never expected from the API
                bad.append(f"case {i}: {type(exc).__name__}: {exc} — {case}")
                print("UNEXPECTED (as found)", bad[-1], flush=True)
            if i % a.check_every == a.check_every - 1 and store_readable(store) is not None:
                unreadable += 1
            if i % 500 == 499:
                print(f"  … {i + 1:,} cases, {time.perf_counter() - t0:,.0f} s, {len(bad)} unexpected", flush=True)
        if store_readable(store) is not None:
            unreadable += 1
        stored = len(tailscope.list_runs(store=store, limit=100_000).runs)
    wall = time.perf_counter() - t0
    print(
        f"cases {done:,} of {a.cases:,}  ran {ran:,}  refused {sum(refused.values()):,}  unexpected {len(bad)}  "
        f"unreadable-store checks {unreadable}  runs in the store {stored:,}  {wall:,.0f} s "
        f"({done / wall:.1f} cases/s)"
    )
    print(f"load average (1 min) at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    print("most common refusals:")
    for words, n in refused.most_common(12):
        print(f"  {n:6,}  {words} …")
    for line in bad[:20]:
        print("UNEXPECTED", line)


if __name__ == "__main__":
    main()
