"""The busy front end: fitted by simulating the probe's open-loop phase on the twin (no server needed here)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel
from tailscope.engine.twin_fit import busy_frontend_excess
from tailscope.engine.twin_step import TwinStepModel
from tailscope.records import RequestRecord
from tailscope.runner.twin_from_runs import fit_busy_frontend, open_loop_specs
from tailscope.sim.run import SimArgs, build_cluster
from tailscope.sim.simulator import Simulation

TWIN = TwinModel(
    coefficients=TwinCoefficients(4000, 300, 0.5, 20, 0.01, 10_000, 0),
    stderr=TwinCoefficients(100, 10, 0.05, 1, 0.001, 500, 0),
    facts=ServerFacts(block_size=128, num_blocks=128, max_num_seqs=64, max_num_batched_tokens=2048),
)


def test_the_busy_front_end_applies_only_when_others_are_in_flight() -> None:
    m = TwinStepModel(replace(TWIN, coefficients=replace(TWIN.coefficients, frontend_busy_us=7000)))
    alone, busy = m.frontend_delay_ns(1, 0.5), m.frontend_delay_ns(3, 0.5)
    assert alone == 10_000_000  # the fitted front end (u = 0.5 is its mean)
    assert busy == alone + 7_000_000


def test_busy_excess_compares_the_busy_arrivals_of_each_side() -> None:
    measured = [(True, 30.0), (True, 32.0), (False, 500.0), (True, 31.0), (True, 40.0), (True, 29.0)]
    simulated = [(True, 20.0), (False, 900.0), (True, 21.0), (True, 19.0), (True, 20.0), (True, 22.0)]
    med, stderr, n = busy_frontend_excess(measured, simulated)
    assert (med, n) == (11.0, 5)  # 31 − 20: each side's own busy requests, the idle ones ignored
    assert stderr > 0
    assert busy_frontend_excess(measured[:3], simulated) == (0.0, 0.0, 0)  # too few to say


def simulate(twin: TwinModel, tmp_path: Path) -> list[RequestRecord]:
    path = tmp_path / "truth.yaml"
    path.write_text(yaml.safe_dump(twin.to_mapping()))
    specs = open_loop_specs(8.0, 600, [64, 256, 768], 32, seed=3)
    return list(Simulation(build_cluster(SimArgs(calibration=path)), iter(specs)).run())


def test_fit_recovers_a_known_busy_front_end(tmp_path: Path) -> None:
    truth = replace(TWIN, coefficients=replace(TWIN.coefficients, frontend_busy_us=6000))
    measured = simulate(truth, tmp_path)  # a "server" that is exactly the twin plus 6 ms for busy arrivals
    fitted = fit_busy_frontend(TWIN, measured)
    # within the estimator's precision on 600 arrivals: the refit draws its own front-end jitter, and busy TTFTs
    # are correlated through the queue (the same comparison with no busy front end at all reads 0.8 ms)
    assert 3500 < fitted.coefficients.frontend_busy_us < 8500
    assert fitted.fitted_on["busy_arrivals"] >= 20
    assert fitted.coefficients.frontend_us == TWIN.coefficients.frontend_us  # nothing else moves


def test_fit_finds_nothing_when_the_twin_already_matches(tmp_path: Path) -> None:
    fitted = fit_busy_frontend(TWIN, simulate(TWIN, tmp_path))
    assert fitted.coefficients.frontend_busy_us < 2500


def test_open_loop_specs_are_poisson_with_lengths_in_turn_and_new_text() -> None:
    a = open_loop_specs(5.0, 300, [64, 256, 768], 32, seed=0)
    assert [s.input_tokens for s in a[:4]] == [64, 256, 768, 64]
    times = [s.at_ns or 0 for s in a]
    assert times == sorted(times)
    assert 50 < times[-1] / 1e9 < 70  # 300 arrivals at 5/s
    assert len({s.seed for s in a}) == 300
    assert open_loop_specs(5.0, 300, [64, 256, 768], 32, seed=0) == a
