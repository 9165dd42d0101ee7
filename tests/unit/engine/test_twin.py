"""The digital twin's pure parts: fitting recovers known costs, the file round-trips, observations are right."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import yaml

from tailscope.engine.twin import (
    SendLag,
    ServerFacts,
    SpeedNoise,
    send_lag_from,
    speed_from_ratios,
    twin_from_mapping,
)
from tailscope.engine.twin_fit import DecodeObservation, PrefillObservation, fit_twin
from tailscope.engine.twin_observe import observations
from tailscope.engine.twin_step import TwinStepModel
from tailscope.errors import ConfigError
from tailscope.records import RequestRecord, Status, TokensSource

FACTS = ServerFacts(block_size=128, num_blocks=128, max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=2048)


def synthetic(noise: float, seed: int = 0) -> tuple[list[PrefillObservation], list[DecodeObservation]]:
    rng = random.Random(seed)
    # truth: overhead 4000 µs, per_seq 300 µs, per_kv 0.5 µs; prefill 20 µs/token, attn 0.01 µs, frontend 10 ms
    pre = []
    for p in (16, 64, 192, 384, 768, 1280) * 4:
        ttft = 10_000 + 4000 + 300 + 20 * p + 0.01 * p * p / 2
        pre.append(PrefillObservation(p, ttft * (1 + rng.gauss(0, noise))))
    dec = []
    for c in (1, 2, 4, 8):
        for ctx in (60, 540):
            for _ in range(4):
                tpot = 4000 + 300 * c + 0.5 * c * ctx
                dec.append(DecodeObservation(float(c), float(ctx), tpot * (1 + rng.gauss(0, noise))))
    return pre, dec


def test_fit_recovers_known_costs_without_noise() -> None:
    pre, dec = synthetic(0.0)
    t = fit_twin(pre, dec, FACTS).coefficients
    assert t.step_overhead_us == pytest.approx(4000, rel=1e-3)
    assert t.per_seq_us == pytest.approx(300, rel=1e-3)
    assert t.per_kv_token_us == pytest.approx(0.5, rel=1e-3)
    assert t.prefill_per_token_us == pytest.approx(20, rel=1e-3)
    assert t.frontend_us == pytest.approx(10_000, rel=1e-2)


def test_fit_is_robust_to_noise_and_outliers() -> None:
    pre, dec = synthetic(0.03, seed=3)
    dec[0] = DecodeObservation(1.0, 60.0, 400_000.0)  # one request hit by a GC pause
    twin = fit_twin(pre, dec, FACTS)
    t, s = twin.coefficients, twin.stderr
    assert t.step_overhead_us == pytest.approx(4000, rel=0.15)
    assert t.per_seq_us == pytest.approx(300, rel=0.3)
    assert s.step_overhead_us > 0  # bootstrap errors are reported
    assert twin.residuals["decode_rel_mad"] < 0.05


def test_too_few_observations_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="run a longer probe"):
        fit_twin([PrefillObservation(10, 1.0)], [], FACTS)


def test_twin_file_round_trip_and_step_model() -> None:
    pre, dec = synthetic(0.0)
    twin = fit_twin(pre, dec, FACTS)
    again = twin_from_mapping(yaml.safe_load(yaml.safe_dump(twin.to_mapping())), source="t.yaml")
    assert again.facts == twin.facts
    assert again.coefficients.to_dict() == pytest.approx(twin.coefficients.to_dict())
    m = TwinStepModel(again)
    assert m.kv_capacity_tokens() == 128 * 128
    # a decode step of 8 sequences with 4,000 KV tokens read: 4000 + 8·300 + 0.5·4000 µs
    assert m.decode_step_ns(8, 4000) == pytest.approx((4000 + 2400 + 2000) * 1e3, rel=1e-3)
    # prefill 100 tokens alone
    assert m.mixed_step_ns([(100, 0)], 0, 0, 1) == pytest.approx((4000 + 300 + 2000 + 0.01 * 100 * 50) * 1e3, rel=1e-3)
    lo, hi = again.shifted(-1.0), again.shifted(1.0)
    assert lo.coefficients.step_overhead_us <= again.coefficients.step_overhead_us <= hi.coefficients.step_overhead_us


@pytest.mark.parametrize(
    "doc",
    [
        {"server": {"block_size": 16}},
        {"server": {"block_size": 0, "num_blocks": 4}, "coefficients_us": {}},
        {"server": {"block_size": 16, "num_blocks": 4}, "coefficients_us": {"nope": 1}},
        {"server": {"block_size": 16, "num_blocks": 4}, "coefficients_us": {"per_seq_us": -1}},
        {"server": {"block_size": 16, "num_blocks": 4, "prompt_scale": 0}, "coefficients_us": {}},
    ],
)
def test_bad_twin_files_are_clear_errors(doc: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"t\.yaml"):
        twin_from_mapping(doc, source="t.yaml")


def rec(i: int, sent_ms: float, first_ms: float, end_ms: float, prompt: int, n: int) -> RequestRecord:
    ms = 1_000_000
    return RequestRecord(
        id=i,
        scheduled_ns=int(sent_ms * ms),
        sent_ns=int(sent_ms * ms),
        first_token_ns=int(first_ms * ms),
        end_ns=int(end_ms * ms),
        status=Status.OK,
        input_tokens=prompt,
        output_tokens=n,
        tokens_source=TokensSource.USAGE,
        chunk_times_ns=tuple(int((first_ms + k * (end_ms - first_ms) / (n - 1)) * ms) for k in range(n)),
        chunk_tokens=(1,) * n,
    )


def test_observations_measure_concurrency_from_the_records() -> None:
    opener = rec(3, -300, -200, -150, 100, 11)  # the run's first request also opened a connection: not prefill
    alone = rec(0, 0, 50, 170, 100, 11)  # nothing else in flight
    a = rec(1, 200, 240, 440, 50, 21)  # two requests sent together: neither is "alone"
    b = rec(2, 200, 250, 450, 60, 21)
    pre, dec, loaded = observations([opener, alone, a, b])
    assert [o.prompt_tokens for o in pre] == [100]
    assert pre[0].ttft_us == pytest.approx(50_000)
    assert sorted(o.in_flight for o in loaded) == [1.0, 1.0]
    d = {round(o.tpot_us): o for o in dec}
    assert d[12_000].concurrency == pytest.approx(1.0)  # (170 − 50) ms / 10 tokens, alone
    assert d[10_000].concurrency > 1.9  # a and b decoded side by side


def test_sim_with_a_twin_uses_the_servers_kv_and_prompt_scale(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from tailscope.sim.run import SimArgs, build_cluster, run_sim

    pre, dec = synthetic(0.0)
    twin = fit_twin(pre, dec, replace(FACTS, prompt_scale=1.5, prompt_offset=12))
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(twin.to_mapping()))
    args = SimArgs(calibration=path, rate=4, requests=60, input_tokens="200", output_tokens="20", store=False)
    cluster = build_cluster(args)
    assert cluster.describe()["kv_capacity_tokens"] == 128 * 128
    a, b = run_sim(args), run_sim(args)
    assert a.summary["ttft_ms"] == b.summary["ttft_ms"]  # deterministic for a seed
    # the server counts 200 synthesized tokens as 1.5 × 200 + 12 = 312: the simulated prefill is that long
    assert {r.input_tokens for r in a.records} == {312}
    # decode at low load ≈ overhead + per_seq + KV reads: between 4.3 and 6 ms
    assert 4.3 < a.summary["tpot_ms"]["p50"] < 6.0


def test_plan_estimates_run_on_a_twin() -> None:
    from tailscope.plan.estimate import estimate_request

    pre, dec = synthetic(0.0)
    m = TwinStepModel(fit_twin(pre, dec, FACTS))
    e = estimate_request(m, input_tokens=300, output_tokens=40, concurrency=2)
    # decode step at 2 sequences ≈ 4000 + 2·300 + 0.5·2·320 µs
    assert e.decode_step_ms == pytest.approx((4000 + 600 + 320) / 1e3, rel=1e-2)
    assert "digital twin" in e.assumptions[0]


def test_speed_noise_is_fitted_from_the_decode_ratios_and_round_trips() -> None:
    pre, dec = synthetic(0.10, seed=5)
    twin = fit_twin(pre, dec, FACTS)
    assert twin.speed is not None
    q = twin.speed.quantiles
    assert list(q) == sorted(q)
    assert q[0] < 1.0 < q[-1]
    assert q[len(q) // 2] == pytest.approx(1.0, abs=0.05)  # the robust fit sits at the median machine
    again = twin_from_mapping(yaml.safe_load(yaml.safe_dump(twin.to_mapping())), source="t.yaml")
    assert again.speed is not None
    assert again.speed.quantiles == pytest.approx(q, abs=1e-3)
    assert speed_from_ratios([1.0] * 9, 300) is None  # too few to say anything


def test_speed_factor_is_deterministic_and_constant_within_a_window() -> None:
    noise = SpeedNoise(window_ms=100, quantiles=(0.5, 1.0, 2.0), seed=7)
    f, g = noise.factor_at(), noise.factor_at()
    ms = 1_000_000
    values = [f(k * 100 * ms + 5 * ms) for k in range(2000)]
    assert values == [g(k * 100 * ms + 99 * ms) for k in range(2000)]  # same seed, same window → same factor
    assert min(values) >= 0.5
    assert max(values) <= 2.0
    assert 0.95 < sorted(values)[1000] < 1.05  # the median of draws from (0.5, 1, 2) is 1
    assert f(-5) == f(0)


@pytest.mark.parametrize(
    ("section", "value", "names"),
    [
        ("speed", {"window_ms": 0, "quantiles": [1, 2]}, r"speed"),
        ("speed", {"window_ms": 10, "quantiles": [2, 1]}, r"speed"),
        ("speed", {"window_ms": 10, "quantiles": [1]}, r"speed"),
        ("speed", {"quantiles": [1, 2]}, r"speed"),
        ("client", {"send_lag_ms": [1.0, 0.5]}, r"client\.send_lag_ms"),
        ("client", {"send_lag_ms": [1.0]}, r"client\.send_lag_ms"),
        ("client", {"send_lag_ms": "x"}, r"client\.send_lag_ms"),
        ("client", [], r"client\.send_lag_ms"),
    ],
)
def test_bad_speed_or_client_section_is_a_clear_error(section: str, value: object, names: str) -> None:
    pre, dec = synthetic(0.0)
    doc = fit_twin(pre, dec, FACTS).to_mapping()
    doc[section] = value
    with pytest.raises(ConfigError, match=r"t\.yaml: " + names):
        twin_from_mapping(doc, source="t.yaml")


def test_speed_noise_widens_the_simulated_tail_not_the_median(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from tailscope.sim.run import SimArgs, run_sim

    pre, dec = synthetic(0.0)
    steady = fit_twin(pre, dec, FACTS)
    noisy = replace(steady, speed=SpeedNoise(window_ms=300, quantiles=(0.7, 0.9, 1.0, 1.1, 1.6), seed=1))
    out = {}
    for name, twin in (("steady", replace(steady, speed=None)), ("noisy", noisy)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(twin.to_mapping()))
        args = SimArgs(calibration=path, rate=3, requests=300, input_tokens="200", output_tokens="40", store=False)
        out[name] = run_sim(args).summary["tpot_ms"]
    assert out["noisy"]["p50"] == pytest.approx(out["steady"]["p50"], rel=0.15)
    assert out["noisy"]["p90"] / out["noisy"]["p50"] > out["steady"]["p90"] / out["steady"]["p50"] + 0.1


def test_send_lag_is_fitted_from_measured_lags_and_round_trips() -> None:
    measured = [0.2, 0.5, 0.6, 0.7, 0.7, 0.8, 0.9, 1.0, 1.5, 4.0] * 10
    lag = send_lag_from([*measured, 15.0, float("nan"), -1.0])
    assert lag is not None
    q = lag.quantiles_ms
    # the NaN and the negative one are dropped, and the hiccup above the 99th percentile is left out
    assert (q[0], q[-1]) == (0.2, 4.0)
    assert list(q) == sorted(q)
    assert lag.lag_ns(0.0) == 200_000
    assert lag.lag_ns(0.5) == pytest.approx(0.75e6, rel=0.05)  # the median
    assert send_lag_from([0.5] * 9) is None  # too few to say anything
    pre, dec = synthetic(0.0)
    from dataclasses import replace

    twin = replace(fit_twin(pre, dec, FACTS), send_lag=lag)
    doc = twin.to_mapping()
    assert doc["client"]["send_lag_ms"][0] == 0.2
    again = twin_from_mapping(yaml.safe_load(yaml.safe_dump(doc)), source="t.yaml")
    assert again.send_lag is not None
    assert again.send_lag.quantiles_ms == pytest.approx(q, abs=1e-3)
    model = TwinStepModel(again)
    draws = [model.send_lag_ns(7, k) for k in range(2000)]
    assert draws == [model.send_lag_ns(7, k) for k in range(2000)]  # deterministic per (seed, request)
    assert min(draws) >= 0.2e6
    assert max(draws) <= 4.0e6
    assert sorted(draws)[1000] == pytest.approx(0.75e6, rel=0.1)
    assert TwinStepModel(replace(again, send_lag=None)).send_lag_ns(7, 1) == 0


def test_send_lag_delays_open_loop_arrivals_and_counts_in_their_latency(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Open loop: each request reaches the server its send lag after the intended time; TTFT and E2E count from
    the intended time (as bench measures them) and the record carries the lag. Closed loop is untouched."""
    from dataclasses import replace

    from tailscope.metrics import request as rq
    from tailscope.sim.run import SimArgs, build_cluster
    from tailscope.sim.simulator import Simulation
    from tailscope.workload.spec import RequestSpec

    pre, dec = synthetic(0.0)
    base = replace(fit_twin(pre, dec, FACTS), speed=None)
    lagged = replace(base, send_lag=SendLag(quantiles_ms=(2.0, 2.0)))
    specs = [RequestSpec(id=i, input_tokens=100, output_tokens=8, at_ns=i * 2_000_000_000, seed=i) for i in range(5)]
    out = {}
    for name, twin in (("base", base), ("lagged", lagged)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(twin.to_mapping()))
        cluster = build_cluster(SimArgs(calibration=path))
        out[name] = sorted(Simulation(cluster, iter(specs)).run(), key=lambda r: r.id)
        closed = [replace(s, at_ns=None) for s in specs]
        out[name + "-closed"] = list(Simulation(cluster, iter(closed), concurrency=1).run())
    for a, b in zip(out["base"], out["lagged"], strict=True):
        assert rq.send_lag_ms(a) == 0.0
        assert rq.send_lag_ms(b) == pytest.approx(2.0)
        assert rq.ttft_ms(b) == pytest.approx(rq.ttft_ms(a) + 2.0, abs=0.01)  # type: ignore[operator]
        assert b.scheduled_ns == a.scheduled_ns
    assert [rq.ttft_ms(r) for r in out["base-closed"]] == [rq.ttft_ms(r) for r in out["lagged-closed"]]


def test_a_noisy_decode_fit_is_named_with_what_to_do() -> None:
    from tailscope.engine.twin import NOISY_DECODE_FIT, noisy_fit_warning

    quiet = replace(fit_twin(*synthetic(0.0), FACTS), residuals={"decode_rel_mad": 0.091, "prefill_rel_mad": 0.07})
    assert noisy_fit_warning(quiet) is None
    assert noisy_fit_warning(replace(quiet, residuals={})) is None  # a twin file without residuals: nothing to say
    noisy = noisy_fit_warning(replace(quiet, residuals={"decode_rel_mad": 0.199}))
    assert noisy is not None
    assert "19.9%" in noisy
    assert f"over {NOISY_DECODE_FIT:.0%}" in noisy
    assert "calibrate again" in noisy
