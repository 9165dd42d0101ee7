"""Gate verdicts on runs with known differences; SLO checks agree with the run summary."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gate_factory import lognormal_run, record

from tailscope.io.contracts import parse_contract
from tailscope.metrics.summary import summarize
from tailscope.records import Status
from tailscope.verify.evaluate import Verdict, evaluate
from tailscope.verify.rundata import RunData

REG = """\
name: svc
regression:
  max_increase: {ttft_ms.p99: 10%, ttft_ms.p50: 10%, output_tokens_per_s: -5%}
  confidence: 0.95
"""


def _verdicts(result: object) -> dict[str, Verdict]:
    return {c.name: c.verdict for c in result.checks}  # type: ignore[attr-defined]


def test_significant_regression_fails() -> None:
    base = lognormal_run("base", 3000, seed=1)
    cand = lognormal_run("cand", 3000, seed=2, ttft_median_ms=300.0)  # +50 % everywhere
    result = evaluate(parse_contract(REG), cand, baseline=base)
    v = _verdicts(result)
    assert v["regression ttft_ms.p99"] is Verdict.FAIL
    assert v["regression ttft_ms.p50"] is Verdict.FAIL
    assert result.exit_code == 1
    p50 = next(c for c in result.checks if c.name == "regression ttft_ms.p50")
    assert p50.ci is not None
    assert p50.ci.rel_low is not None
    assert p50.ci.rel_high is not None
    assert p50.ci.rel_low < 0.5 < p50.ci.rel_high
    assert "baseline" in p50.detail
    assert "CI" in p50.detail


def test_noise_level_difference_passes_or_is_inconclusive() -> None:
    base = lognormal_run("base", 3000, seed=1)
    cand = lognormal_run("cand", 3000, seed=2)  # same distribution, different draw
    result = evaluate(parse_contract(REG), cand, baseline=base)
    assert all(c.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE) for c in result.checks)
    assert result.exit_code == 0


def test_small_sample_straddles_and_strict_fails() -> None:
    base = lognormal_run("base", 150, seed=1)
    cand = lognormal_run("cand", 150, seed=2, ttft_median_ms=215.0)
    contract = parse_contract(REG)
    result = evaluate(contract, cand, baseline=base)
    p99 = next(c for c in result.checks if c.name == "regression ttft_ms.p99")
    assert p99.verdict is Verdict.INCONCLUSIVE
    assert "straddles" in p99.detail
    assert result.exit_code == 0
    assert evaluate(contract, cand, baseline=base, strict=True).exit_code == 1


def test_improvement_passes() -> None:
    base = lognormal_run("base", 2000, seed=1, ttft_median_ms=300.0)
    cand = lognormal_run("cand", 2000, seed=2, ttft_median_ms=150.0)
    result = evaluate(parse_contract(REG), cand, baseline=base)
    assert _verdicts(result)["regression ttft_ms.p99"] is Verdict.PASS
    assert result.exit_code == 0


def test_throughput_drop_fails() -> None:
    base = lognormal_run("base", 2000, seed=1, rate_rps=20.0)
    cand = lognormal_run("cand", 2000, seed=2, rate_rps=20.0, error_every=4)  # 25 % of requests fail
    result = evaluate(parse_contract(REG), cand, baseline=base)
    check = next(c for c in result.checks if c.name == "regression output_tokens_per_s")
    assert check.verdict is Verdict.FAIL
    assert check.observed is not None
    assert check.observed == pytest.approx(-0.25, abs=0.02)


def test_slo_checks_match_the_summary() -> None:
    run = lognormal_run("r", 1000, seed=5, error_every=50)
    summary = summarize(run.records)
    contract = parse_contract(
        "name: s\nslo:\n"
        "  - {metric: ttft_ms, percentile: p99, max: 100000}\n"
        "  - {metric: tpot_ms, percentile: p95, max: 1}\n"
        "  - {metric: itl_ms, percentile: p50, max: 1000}\n"
        "  - {metric: error_rate, max: 0.01}\n"
        "  - {metric: requests_per_s, min: 1}\n"
        "  - {metric: output_tokens_per_s, min: 1}\n"
    )
    result = evaluate(contract, run)
    obs = {c.name: c.observed for c in result.checks}
    assert obs["slo ttft_ms.p99"] == pytest.approx(summary.ttft_ms.p99)
    assert obs["slo tpot_ms.p95"] == pytest.approx(summary.tpot_ms.p95)
    assert obs["slo itl_ms.p50"] == pytest.approx(summary.itl_ms.p50)
    assert obs["slo error_rate"] == pytest.approx(summary.requests.failed / summary.requests.total)
    assert obs["slo requests_per_s"] == pytest.approx(summary.requests_per_s)
    assert obs["slo output_tokens_per_s"] == pytest.approx(summary.output_tokens_per_s)
    v = _verdicts(result)
    assert v["slo tpot_ms.p95"] is Verdict.FAIL
    assert v["slo error_rate"] is Verdict.FAIL
    assert v["slo ttft_ms.p99"] is Verdict.PASS
    assert result.exit_code == 1
    # the same checks from the stored summary alone (no records) give the same numbers
    from_summary = evaluate(contract, RunData(id="r", summary=summary.to_dict()))
    assert {c.name: c.observed for c in from_summary.checks} == pytest.approx(obs)


def test_goodput_uses_the_contract_latency_limits_per_class() -> None:
    recs = [record(i, sched_ms=i * 100.0, ttft_ms=50.0 if i % 2 else 500.0) for i in range(10)]
    recs += [record(10 + i, sched_ms=i * 100.0, ttft_ms=500.0, request_class="long") for i in range(10)]
    contract = parse_contract(
        "name: s\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 100, class: default}\n"
        "  - {metric: goodput_rps, min: 1}\n"
    )
    result = evaluate(contract, RunData(id="r", records=tuple(recs)))
    good = next(c for c in result.checks if c.name == "slo goodput_rps")
    window_s = (max(r.end_ns for r in recs if r.end_ns) - 0) / 1e9
    assert good.observed == pytest.approx(15 / window_s)  # 5 fast default requests + all 10 long ones


def test_missing_data_exit_2() -> None:
    run = lognormal_run("r", 50, seed=1)
    contract = parse_contract(
        "name: s\nslo:\n  - {metric: e2e_ms, percentile: p99, max: 10, class: nope}\n"
        "regression:\n  max_increase: {ttft_ms.p99: 10%}\nlayers:\n  - {layer: retrieval, max_ms: 5}\n"
    )
    result = evaluate(contract, run)
    assert [c.verdict for c in result.checks] == [Verdict.MISSING] * 3
    assert result.exit_code == 2
    assert "class 'nope'" in result.checks[0].detail
    assert "runs tag" in result.checks[1].detail
    # a definite failure outranks missing data
    failing = dataclasses.replace(contract, slos=(dataclasses.replace(contract.slos[0], request_class=None),))
    assert evaluate(failing, run).exit_code == 1


def test_layer_checks() -> None:
    contract = parse_contract("name: s\nlayers:\n  - {layer: retrieval, percentile: p99, max_ms: 200}\n")
    fast = {"retrieval": np.linspace(10, 150, 500)}
    slow = {"retrieval": np.linspace(10, 400, 500)}
    assert evaluate(contract, RunData(id="r"), layer_samples=fast).exit_code == 0
    bad = evaluate(contract, RunData(id="r"), layer_samples=slow)
    assert bad.checks[0].verdict is Verdict.FAIL
    assert bad.checks[0].samples == 500
    other = evaluate(contract, RunData(id="r"), layer_samples={"gateway": np.ones(3)})
    assert other.exit_code == 2
    assert "layers seen: gateway" in other.checks[0].detail


def test_warmup_and_failed_records_are_excluded_from_latencies() -> None:
    recs = [record(0, sched_ms=0, ttft_ms=9999.0, warmup=True), record(1, sched_ms=0, ttft_ms=0, status=Status.ERROR)]
    recs += [record(i, sched_ms=i, ttft_ms=100.0) for i in range(2, 20)]
    contract = parse_contract("name: s\nslo:\n  - {metric: ttft_ms, percentile: max, max: 100}\n")
    assert evaluate(contract, RunData(id="r", records=tuple(recs))).exit_code == 0


def test_goodput_regression_uses_the_contract_slos() -> None:
    base = RunData(id="b", records=tuple(record(i, sched_ms=i * 50.0, ttft_ms=100.0) for i in range(400)))
    slow_half = tuple(record(i, sched_ms=i * 50.0, ttft_ms=100.0 if i % 2 else 900.0) for i in range(400))
    contract = parse_contract(
        "name: s\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 500}\n"
        "regression:\n  max_increase: {goodput_rps: -5%, requests_per_s: -5%}\n"
    )
    result = evaluate(contract, RunData(id="c", records=slow_half), baseline=base)
    v = _verdicts(result)
    assert v["regression goodput_rps"] is Verdict.FAIL
    assert v["regression requests_per_s"] in (Verdict.PASS, Verdict.INCONCLUSIVE)  # every request still completed
    good = next(c for c in result.checks if c.name == "regression goodput_rps")
    assert good.observed == pytest.approx(-0.5, abs=0.03)  # half the requests, in a slightly longer window


def test_a_lagging_client_is_noted() -> None:
    recs = tuple(record(i, sched_ms=i * 10.0, ttft_ms=50.0, lag_ms=30.0) for i in range(100))
    result = evaluate(
        parse_contract("name: s\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 100}\n"),
        RunData(id="r", records=recs),
    )
    assert result.exit_code == 0
    assert len(result.notes) == 1
    assert result.notes[0].startswith("the load generator fell behind (send lag")


def _streams(run_id: str, seed: int, scale: float = 1.0) -> RunData:
    """200 streams of 50 tokens; each stream has its own speed (gaps within a stream are alike)."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(200):
        level = 20.0 * scale * float(rng.lognormal(0, 0.4))
        gaps = (level * rng.lognormal(0, 0.05, 49)).tolist()
        recs.append(record(i, sched_ms=i * 100.0, ttft_ms=50.0, gaps_ms=gaps))
    return RunData(id=run_id, records=tuple(recs))


def test_itl_regressions_treat_streams_as_clusters() -> None:
    contract = parse_contract("name: s\nregression:\n  max_increase: {itl_ms.p90: 5%}\n")
    base = _streams("b", 4)
    # same distribution, other draws: +5 … +12 % at p90 by chance; an i.i.d. bootstrap over the 9,800 gaps puts the
    # whole interval above +5 % for four of these five and would fail the gate
    noise = [evaluate(contract, _streams("c", seed), baseline=base).checks[0] for seed in (0, 1, 2, 3, 100)]
    assert all(c.verdict is not Verdict.FAIL for c in noise), [c.detail for c in noise]
    slower = evaluate(contract, _streams("c", 7, scale=1.6), baseline=base).checks[0]
    assert slower.verdict is Verdict.FAIL


def test_an_unfinished_run_is_noted() -> None:
    run = dataclasses.replace(lognormal_run("r", 50, seed=1), status="incomplete")
    result = evaluate(parse_contract("name: s\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 100000}\n"), run)
    assert result.notes == ("the run r is incomplete, not complete: its numbers may not be final",)
