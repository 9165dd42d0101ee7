"""A closed loop's start (``sim --stagger``, ``simulate(stagger=…)``): spread over one request's lifetime by
default, all at once with 0 — as ``tailscope bench --concurrency`` starts its clients."""

from __future__ import annotations

import json

import pytest

import tailscope
from tailscope.errors import ConfigError
from tailscope.report.sim_console import sim_lines

LOOP = {"requests": 96, "concurrency": 16, "input_tokens": "uniform:100:900", "output_tokens": "64", "seed": 1}


def _starts(stagger_s: float, clients: int) -> set[int]:
    """When each client starts: client ``i`` at ``i / clients × stagger`` (ns)."""
    ramp = round(stagger_s * 1e9)
    return {ramp * i // clients for i in range(clients)}


def _scheduled(result: tailscope.SimResult) -> set[int]:
    return {r.scheduled_ns for r in result.records}


def test_default_spreads_the_clients_over_a_lifetime_and_says_so() -> None:
    res = tailscope.simulate(**LOOP)
    assert res.sim.clients == 16
    assert res.sim.clients_stagger_s is not None
    assert res.sim.clients_stagger_s > 0
    assert _starts(res.sim.clients_stagger_s, 16) <= _scheduled(res)  # client i at i / C × stagger
    assert any("--stagger 0 simulates that" in line for line in sim_lines(res.sim))
    assert json.loads(res.to_json())["summary"]["sim"]["clients_stagger_s"] == res.sim.clients_stagger_s


def test_stagger_zero_starts_every_client_at_once_and_the_first_wave_queues() -> None:
    together = tailscope.simulate(**LOOP, stagger=0)
    spread = tailscope.simulate(**LOOP)
    assert sum(r.scheduled_ns == 0 for r in together.records) == 16
    assert together.sim.clients_stagger_s == 0
    assert any("started together" in line for line in sim_lines(together.sim))
    # sixteen prompts at once wait for each other's prefills: the first wave's TTFT is above the spread start's
    first_wave = sorted((r.first_token_ns or 0) - r.scheduled_ns for r in together.records if r.id < 16)
    spread_wave = sorted((r.first_token_ns or 0) - r.scheduled_ns for r in spread.records if r.id < 16)
    assert first_wave[-1] > spread_wave[-1]
    assert together.summary.ttft_ms.mean > spread.summary.ttft_ms.mean


def test_an_explicit_stagger_is_used_and_recorded() -> None:
    res = tailscope.simulate(**LOOP, stagger=2.0)
    assert res.sim.clients_stagger_s == 2.0
    assert _starts(2.0, 16) <= _scheduled(res)
    assert res.run.settings["load"]["stagger_s"] == 2.0


def test_an_open_loop_has_no_stagger() -> None:
    res = tailscope.simulate(requests=20, rate=5.0, input_tokens=100, output_tokens=8)
    assert res.sim.clients == 0
    assert res.sim.clients_stagger_s is None
    assert not any("closed loop" in line for line in sim_lines(res.sim))


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"concurrency": 4, "stagger": -1.0}, "--stagger -1"),
        ({"concurrency": 4, "stagger": float("inf")}, "--stagger inf"),
        ({"rate": 2.0, "stagger": 1.0}, "drop it with --rate"),
    ],
)
def test_a_bad_stagger_is_refused_naming_the_flag(options: dict[str, float], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        tailscope.simulate(requests=8, input_tokens=64, output_tokens=4, **options)


#: a loop that bunches: 128 clients of 1,024-token prompts and 128-token answers on one H100 (a full-budget prefill
#: step lasts ≈ 20 decode steps and gathers the requests that return during it; docs/engine.md, Closed loops)
BUNCHING = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "engine": "trtllm",
    "concurrency": 128,
    "requests": 3840,
    "input_tokens": "1024",
    "seed": 0,
}


def test_a_fixed_length_loop_that_bunches_into_waves_says_so() -> None:
    res = tailscope.simulate(**BUNCHING, output_tokens="128")
    waves = [w for w in res.summary.warnings if w.startswith("WAVES:")]
    assert len(waves) == 1
    assert "uniform:102:128" in waves[0]
    assert res.summary.steady is not None
    assert res.summary.steady.stationary is False
    # the stored summary (and --json) carries it with the other warnings
    assert waves[0] in json.loads(res.to_json())["summary"]["warnings"]


def test_lengths_with_a_spread_an_open_loop_and_a_settled_loop_do_not_warn_of_waves() -> None:
    spread = tailscope.simulate(**BUNCHING, output_tokens="uniform:102:128")
    settled = tailscope.simulate(**{**BUNCHING, "concurrency": 8, "requests": 480}, output_tokens="128")
    open_loop = tailscope.simulate(requests=400, rate=20.0, input_tokens=1024, output_tokens=128, seed=0)
    assert settled.summary.steady is not None
    assert settled.summary.steady.stationary is True
    for res in (spread, settled, open_loop, tailscope.simulate(**LOOP)):
        assert not any(w.startswith("WAVES:") for w in res.summary.warnings)
