"""bench --repeat / --until-precise on the built-in engine: separate runs, their spread, the pooled percentile."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tailscope
from tailscope.api.bench import bench_repeat
from tailscope.store.runs import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_until_precise_stops_when_the_interval_is_tight_enough(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    opts = tailscope.BenchOptions(requests=30, concurrency=6, output_tokens=8)
    out = bench_repeat(opts, until_precise="ttft_ms.p50=50%", max_repeats=3, store=db)
    assert out.stopped == "precise"
    assert out.precision is not None
    assert out.precision.met
    assert out.precision.samples == 30 * len(out.runs)
    assert len(RunStore(db).list_runs()) == len(out.runs)  # every repetition is its own stored run
    never = bench_repeat(opts, until_precise="ttft_ms.p99=0.001%", max_repeats=2)
    assert never.stopped == "max-repeats"
    assert len(never.runs) == 2
    assert not never.precision or not never.precision.met
    verdict = never.verdict(max_error_rate=1.0)  # a target not reached fails the repetition's verdict
    assert not verdict.passed
    assert verdict.reasons[-1] == "ttft_ms.p99=0.001% not reached within 2 runs (--max-repeats)"
    cut = dataclasses.replace(never, stopped="interrupted").verdict(max_error_rate=1.0)
    assert cut.reasons[-1] == "ttft_ms.p99=0.001% not reached within 2 runs (interrupted)"
    assert out.verdict(max_error_rate=1.0).passed


def test_cli_repeat_writes_the_runs_and_their_spread(tmp_path: Path) -> None:
    out = tmp_path / "rep.json"
    p = subprocess.run(
        [sys.executable, "-m", "tailscope", "bench", "-n", "12", "-c", "4", "--output-tokens", "8", "--repeat", "2",
         "--db", str(tmp_path / "db.duckdb"), "--json", str(out), "-q"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert len(doc["repeat"]["runs"]) == 2
    assert doc["repeat"]["stopped"] == "repeats"
    assert doc["repeat"]["pooled"]["ttft_ms"]["count"] == 24
    assert "2 runs of the same workload" in p.stdout
