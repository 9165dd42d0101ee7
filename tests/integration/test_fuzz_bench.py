"""Random option and profile combinations against a live built-in engine: every case runs or is refused with a
message — never an unexpected exception — and the store stays readable (the long run: benchmarks/fuzz_bench.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tailscope.testing.builtin_server import built_in_server
from tailscope.testing.fuzz_bench import draw_case, run_case, store_readable

pytestmark = [pytest.mark.integration, pytest.mark.beside]  # 40–55 s: beside the main suite

CASES = int(os.environ.get("TAILSCOPE_FUZZ_BENCH_CASES", "250"))


def test_random_combinations_never_escape_and_never_break_the_store(tmp_path: Path) -> None:
    import tailscope

    rng = random.Random(20261202)
    store = tmp_path / "fuzz.duckdb"
    bad: list[str] = []
    with built_in_server(speed=50.0) as url:
        for i in range(CASES):
            case = draw_case(rng)
            exc = run_case(case, url, store, tmp_path)
            if exc is not None:
                bad.append(f"case {i}: {type(exc).__name__}: {exc} — {case}")
            if i % 50 == 49:
                err = store_readable(store)
                assert err is None, f"store unreadable after case {i}: {err}"
    assert not bad, "\n".join(bad[:10])
    assert store_readable(store) is None
    runs = tailscope.list_runs(store=store).runs
    assert len(runs) >= CASES // 10, "no case ran: the generator draws too few valid cases"
