"""Long fuzz run over every input parser: N mutated cases per parser (seeded), zero unhandled exceptions expected.

Every case must either parse or raise a TailscopeError with a message; anything else is printed with its input.

    .venv/bin/python benchmarks/fuzz.py --cases 10000
"""

from __future__ import annotations

import argparse
import random
import time

from tailscope.testing.fuzzing import TARGETS, mutate, run_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10_000, help="cases per parser")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated parser names")
    a = ap.parse_args()
    names = a.only.split(",") if a.only else sorted(TARGETS)
    print(f"{'parser':<16} {'cases':>7} {'unhandled':>9} {'cases/s':>9}")
    total_bad = 0
    for name in names:
        _, seeds = TARGETS[name]
        rng = random.Random(f"{a.seed}:{name}")
        bad = 0
        t = time.perf_counter()
        for i in range(a.cases):
            # a tenth of the cases are raw random bytes, the rest mutations of a valid seed
            if i % 10 == 0:
                data = rng.randbytes(rng.randint(0, 300))
            else:
                data = mutate(rng.choice(seeds), rng)
            exc = run_target(name, data)
            if exc is not None:
                bad += 1
                if bad <= 3:
                    print(f"  {name}: {type(exc).__name__}: {exc} on {data[:160]!r}")
        dt = time.perf_counter() - t
        total_bad += bad
        print(f"{name:<16} {a.cases:>7} {bad:>9} {a.cases / dt:>9,.0f}", flush=True)
    print(f"total unhandled: {total_bad}")
    raise SystemExit(1 if total_bad else 0)


if __name__ == "__main__":
    main()
