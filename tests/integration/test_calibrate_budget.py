"""``calibrate --budget``: the probe keeps within its budget against a slow server — fewer rounds when a round is
slow, a partial twin (with what is missing) when the budget cuts the probe, and a one-line error with the runs kept
in the store when too little was measured to fit anything.

The server is the scripted one (loopback, known TTFT and token gap); nothing here starts vLLM.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

import tailscope
from tailscope.engine.twin import ServerFacts
from tailscope.runner.calibrate import ProbePlan, run_probe
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration

SLACK_S = 3.0  # the bench runs' start and store writes, on a shared machine


def within(judgement: Judgement, wall: float, budget: float) -> None:
    judgement.holds(wall <= budget * 1.5 + SLACK_S, f"calibrate took {wall:.1f} s on a {budget:g} s budget")


def test_a_slow_round_gives_fewer_rounds_and_the_closing_phases_still_run(judgement: Judgement) -> None:
    facts = ServerFacts(block_size=16, num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=2048)
    plan = ProbePlan(
        prompt_ladder=(16, 256), repeats=1, concurrencies=(1, 2), rounds=5, anchor=False, open_loop=None,
        burst=True, burst_requests=4, time_budget_s=4.0,
    )  # fmt: skip
    phases: list[str] = []
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=4)) as srv:
        t0 = time.monotonic()
        results, info, _ = asyncio.run(run_probe(srv.url, None, facts, plan, on_phase=phases.append))
        wall = time.monotonic() - t0
    within(judgement, wall, plan.time_budget_s)
    if "partial" in info:  # a round took over a third of the budget: the machine is too busy for this plan
        judgement.cannot_judge(f"the budget cut the probe ({info['partial']}) in {wall:.1f} s")
        return
    assert 1 <= info["rounds"]["done"] < 5
    assert info["budget_note"].startswith(f"{info['rounds']['done']} of 5 rounds fit in 4 s")
    assert any(p.startswith("budget: ") for p in phases)
    assert results[-1].run.settings["probe"] == "burst"  # the closing phase ran after the last round


def test_a_budget_cut_probe_keeps_a_partial_twin_naming_what_is_missing(tmp_path: Path, judgement: Judgement) -> None:
    """The open loop (144 arrivals at 5/s) cannot fit a 6 s budget: the twin is fitted without the rest of it, and the
    probe's stored runs refit later (``--from-runs``)."""
    store = tmp_path / "runs.duckdb"
    lines: list[str] = []
    with ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=2)) as srv:
        t0 = time.monotonic()
        cal = tailscope.calibrate(
            srv.url, budget=6.0, rounds=2, prefill_repeats=1, concurrencies="1,2", burst=True, block_size=16,
            num_blocks=4096, store=store, out=tmp_path / "twin.yaml", on_phase=lines.append,
        )  # fmt: skip
        wall = time.monotonic() - t0
    within(judgement, wall, 6.0)
    partial = cal.document["partial"]
    assert partial["budget_s"] == 6.0
    assert "burst" in partial["phases_not_run"]
    assert partial["rounds_done"] < partial["rounds_planned"] or partial["phases_cut"]
    assert cal.notes["partial"].startswith("the 6 s budget ran out, so this twin is fitted on part of the probe (")
    assert any(line.startswith("warning: the 6 s budget ran out") for line in lines)
    written = yaml.safe_load((tmp_path / "twin.yaml").read_text(encoding="utf-8"))
    assert written["partial"] == partial
    # the partial twin is a twin: sim reads it
    sim = tailscope.simulate(calibration=tmp_path / "twin.yaml", rate=2, requests=10, input_tokens=64, output_tokens=8)
    assert sim.summary.requests.completed == 10
    again = tailscope.calibrate(
        from_runs=cal.document["fitted_on"]["runs"], store=store, block_size=16, num_blocks=4096
    )
    assert "partial" not in again.document
    assert again.twin.facts.block_size == 16


def test_too_little_measured_is_one_line_and_the_runs_stay_in_the_store(tmp_path: Path, judgement: Judgement) -> None:
    """Requests of 0.6 s on a 1 s budget: the prefill ladder is cut after a length or two and no decode is run."""
    store = tmp_path / "runs.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=600, itl_ms=50)) as srv:
        t0 = time.monotonic()
        with pytest.raises(tailscope.ConfigError) as refused:
            tailscope.calibrate(
                srv.url, budget=1.0, rounds=1, prefill_repeats=1, burst=False, block_size=16, num_blocks=4096,
                store=store,
            )  # fmt: skip
        wall = time.monotonic() - t0
    within(judgement, wall, 1.0)
    msg = str(refused.value)
    assert "\n" not in msg
    assert msg.startswith("--budget 1: too little measured to fit a twin in ")
    assert "0 decode requests" in msg
    assert "give --budget " in msg
    ids = msg.split("--from-runs ")[1:]
    assert ids, msg
    stored = tailscope.list_runs(store=store, tag="probe")
    assert {r.strip() for r in ids} <= {r.run.id for r in stored.runs}


def test_the_cli_prints_the_partial_twin_s_warning_and_the_nothing_fits_error_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "tailscope", "calibrate", *args, "--block-size", "16", "--num-blocks", "4096"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)

    db = str(tmp_path / "runs.duckdb")
    with ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=2)) as srv:
        p = cli("--url", srv.url, "--budget", "5", "--rounds", "2", "--prefill-repeats", "1", "--concurrencies", "1,2",
                "--no-burst", "--out", str(tmp_path / "twin.yaml"), "--db", db)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "probe: warning: the 5 s budget ran out" in p.stderr
    assert "partial: the 5 s budget ran out, so this twin is fitted on part of the probe (" in p.stdout
    assert "partial" in yaml.safe_load((tmp_path / "twin.yaml").read_text(encoding="utf-8"))
    with ScriptedServer(ScriptedConfig(ttft_ms=600, itl_ms=50)) as srv:
        p = cli("--url", srv.url, "--budget", "1", "--rounds", "1", "--prefill-repeats", "1", "--no-burst", "--db", db)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if "too little measured" in line]
    assert len(lines) == 1, p.stderr
    assert "--from-runs " in lines[0]
