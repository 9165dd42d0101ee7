"""``plan capacity`` is steady-state honest (issue 23 item 9): every re-check simulates a window long enough for a
queue to form, runs the over-saturation test on it, and the GPU count it answers — simulated again, longer, on its
own — meets the SLO. At 10,000 req/s a 1,500-request check lasted under a second and passed fleets whose queues
grow without bound."""

from __future__ import annotations

import pytest

from tailscope.api.capacity import plan_capacity
from tailscope.api.sim import simulate
from tailscope.metrics.saturation import detect_saturation
from tailscope.plan.capacity import SimCheck

SLO = "ttft_p99=1s"
LENGTHS = {"input_tokens": "512", "output_tokens": "64"}


@pytest.mark.parametrize("target", [100.0, 1_000.0, 10_000.0])
def test_the_answer_meets_the_slo_when_simulated_long_enough(target: float) -> None:
    res = plan_capacity("llama-3.1-8b", "h100-sxm", target_rps=target, slo=[SLO], tp=[1], **LENGTHS)
    best = res.best
    assert best is not None
    assert best.check is not None
    check: SimCheck = best.check
    assert check.passed
    assert not check.saturated
    assert check.steady == "steady state"
    assert check.window_s is not None
    assert check.needed_window_s is not None
    assert check.window_s >= 0.9 * check.needed_window_s >= 0.9 * 120.0  # seconds of arrivals, not 1,500 requests
    # independently: the answer's load per replica, simulated two and four times as long, meets the SLO with no
    # growing queue (a 30-second window once passed counts whose queue grew past the SLO within two minutes)
    load = target * 1.2
    replicas = best.replicas if check.scope == "fleet" else 1
    rate = load if check.scope == "fleet" else load / best.replicas
    for times in (2, 4):
        n = int(rate * times * check.needed_window_s)
        out = simulate(rate=rate, replicas=replicas, requests=n, warmup=n // 10, slo=[SLO], **LENGTHS)
        assert out.summary.ttft_ms.p99 is not None
        assert out.summary.ttft_ms.p99 <= 1000.0, times
        assert not any(v.saturated for v in detect_saturation(out.records)), times
    # one replica fewer fails its own check (the answer is the smallest)
    assert best.replicas == 1 or best.analytic_replicas is not None


def test_a_short_window_is_reported_as_transient_only() -> None:
    res = plan_capacity(
        "llama-3.1-8b", "h100-sxm", target_rps=50.0, slo=[SLO], tp=[1], max_sim_requests=200, sim_requests=100,
        **LENGTHS,
    )  # fmt: skip
    assert res.best is not None
    assert res.best.check is not None
    assert res.best.check.steady == "transient only"  # 200 requests at this load: seconds, not 30 s
    doc = res.to_dict()
    assert doc["best"]["check"]["steady"] == "transient only"


def test_a_fleet_whose_queue_grows_fails_the_check() -> None:
    from tailscope.sim.run import SimArgs, run_sim

    # one H100 at 800 req/s: the queue grows without bound (TTFT p99 of tens of seconds in `sim`)
    out = run_sim(SimArgs(rate=800.0, requests=16_000, warmup=1_600, store=False, **LENGTHS))
    assert any(v.saturated for v in detect_saturation(out.records))
