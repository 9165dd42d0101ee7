"""The steady-state closed loop, the fit that uses it, and the disaggregated pools' step models."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.engine.closed_loop import aggregated, coefficient_step, disaggregated
from tailscope.engine.disagg import kv_link_bytes_per_s, kv_transfer_seconds, pool_step_models
from tailscope.engine.fit import Dataset, Observation, Pool, fit, predict
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Efficiencies, Parallelism
from tailscope.sim.run import SimArgs, run_sim


def _a(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=float)


def _closed(m: TrainedStepModel, isl: float, osl: float, clients: float, budget: float = 8192) -> tuple[float, float]:
    e = m.efficiency
    t1, tau = aggregated(
        coefficient_step(m.coeffs),
        _a(isl),
        _a(osl),
        _a(clients),
        _a(budget),
        _a(e.frontend_ms / 1e3),
        _a(e.inflight_us / 1e6),
        _a(e.burst),
        sched_iters=_a(e.sched_iters),
    )
    return float(t1[0]), float(tau[0])


def test_closed_loop_properties() -> None:
    m = TrainedStepModel(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    prev = (0.0, 0.0)
    for c in (1, 4, 16, 64, 256):
        ttft, tpot = _closed(m, 1024, 256, c)
        assert ttft > prev[0]
        assert tpot > prev[1]
        prev = (ttft, tpot)
    # one client: TPOT is a decode step at batch ≈ 1, TTFT the front end + one prefill (+ the step in progress)
    ttft, tpot = _closed(m, 1024, 256, 1)
    assert tpot == pytest.approx(m.decode_step_ns(1, 1024 + 128) / 1e9, rel=0.05)
    assert ttft > m.efficiency.frontend_ms / 1e3 + m.step_s([(1024, 0)], 0, 0)
    # prompts that fill the budget are chunked: longer TTFT
    assert _closed(m, 16000, 256, 8)[0] > 2 * _closed(m, 4000, 256, 8)[0]


def test_vectorised_rows_are_independent() -> None:
    m = TrainedStepModel(resolve_model("qwen3-32b"), resolve_gpu("h100-sxm"), Parallelism(4))
    e = m.efficiency
    step = coefficient_step(m.coeffs)
    both = aggregated(step, _a(1024, 4096), _a(128, 512), _a(8, 64), _a(8192, 8192), e.frontend_ms / 1e3,
                      e.inflight_us / 1e6, e.burst, sched_iters=e.sched_iters)  # fmt: skip
    one = _closed(m, 4096, 512, 64)
    assert both[0][1] == pytest.approx(one[0], rel=1e-9)
    assert both[1][1] == pytest.approx(one[1], rel=1e-9)


def test_clients_beyond_the_kv_cache_wait_for_admission() -> None:
    """A replica that holds N requests serves C > N clients as N, the rest wait (C − N) / λ in TTFT."""
    m = TrainedStepModel(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    e = m.efficiency
    step = coefficient_step(m.coeffs)
    args = (_a(1024), _a(256), _a(96), _a(8192), _a(e.frontend_ms / 1e3), _a(e.inflight_us / 1e6), _a(e.burst))
    free = aggregated(step, *args)
    assert aggregated(step, *args, max_running=_a(1000.0))[0][0] == pytest.approx(free[0][0])
    t1, tau = aggregated(step, *args, max_running=_a(64.0))
    inner = aggregated(step, _a(1024), _a(256), _a(64), *args[3:])
    assert tau[0] == pytest.approx(inner[1][0])  # the decode batch is the 64 admitted
    lam = 64 / (inner[0][0] + 255 * inner[1][0])
    assert t1[0] == pytest.approx(inner[0][0] + 32 / lam)
    assert tau[0] < free[1][0]


def test_simulation_lands_near_the_analytic_closed_loop() -> None:
    """`tailscope sim` of a closed loop uses the same step model: its mean TTFT/TPOT come close to the analysis."""
    args = SimArgs(
        model="llama-3.1-70b", gpu="h200", tp=4, backend="trtllm", weights_dtype="fp8", kv_dtype="fp8",
        concurrency=32, requests=320, warmup=64, input_tokens="1024", output_tokens="256", store=False,
    )  # fmt: skip
    s = run_sim(args).summary
    m = TrainedStepModel(resolve_model("llama-3.1-70b"), resolve_gpu("h200"), Parallelism(4), engine="trtllm",
                         weights_dtype="fp8", kv_dtype="fp8")  # fmt: skip
    ttft, tpot = _closed(m, 1024, 256, 32)
    assert s["tpot_ms"]["mean"] == pytest.approx(tpot * 1e3, rel=0.1)
    assert s["ttft_ms"]["mean"] == pytest.approx(ttft * 1e3, rel=0.35)


def test_a_disaggregated_simulation_lands_near_the_analytic_closed_loop() -> None:
    """`tailscope sim --disagg` with attention-DP and expert-parallel pools runs the pools the fit prices: its mean
    TTFT/TPOT come close to the closed loop's (``benchmarks/sim_accuracy.py --sim-mode disagg`` on corpus rows)."""
    from tailscope.api.sim import simulate
    from tailscope.testing.closed_loop_check import analytic_closed_loop

    options = {"model": "deepseek-ai/DeepSeek-R1", "gpu": "gb200", "engine": "trtllm", "weights_dtype": "fp4",
               "kv_dtype": "fp8", "disagg": "prefill=1x4:dp4:ep4,decode=1x8:dp8:ep8", "concurrency": 64,
               "input_tokens": "1024", "output_tokens": "256"}  # fmt: skip
    ttft, tpot = analytic_closed_loop(options)
    s = simulate(**options, requests=640, warmup=128).summary  # type: ignore[arg-type]
    assert s.tpot_ms.mean == pytest.approx(tpot, rel=0.1)
    assert s.ttft_ms.mean == pytest.approx(ttft, rel=0.35)


def test_disaggregated_pools_and_kv_transfer() -> None:
    ds, gb200, b200 = resolve_model("deepseek-r1"), resolve_gpu("gb200"), resolve_gpu("b200")
    pre, dec, xfer = pool_step_models(ds, gb200, Parallelism(4, 1, 4), Parallelism(1, 8, 8), engine="trtllm",
                                      weights_dtype="fp4", kv_dtype="fp8")  # fmt: skip
    assert pre.par.gpus == 4
    assert dec.par.attention_dp == 8
    # one NVL72 domain: NVLink between the workers; two HGX boards: the scale-out network
    assert kv_link_bytes_per_s(gb200, 4, 8) == 4 * gb200.interconnect_gbps * 1e9
    assert kv_link_bytes_per_s(b200, 4, 8) == 4 * b200.scaleout_gbps * 1e9
    assert xfer.ns(8192) > xfer.ns(1024) > 0
    eff = Efficiencies(kv_xfer=0.5, kv_xfer_ms=1.0)
    assert kv_transfer_seconds(1000, 70_000, 100e9, eff) == pytest.approx(1e-3 + 1000 * 70_000 / 50e9)
    # the closed loop: decode-only TPOT, TTFT = front end + prefill (+ wait) + transfer
    ttft, tpot = disaggregated(
        coefficient_step(pre.coeffs), coefficient_step(dec.coeffs), _a(8192), _a(1024), _a(64), _a(1), _a(8),
        _a(16384), _a(0.05), _a(0.0), _a(xfer.ns(8192) / 1e9),
    )  # fmt: skip
    assert tpot[0] == pytest.approx(dec.decode_step_ns(8, 8 * (8192 + 512)) / 1e9, rel=0.1)
    assert ttft[0] > 0.05 + pre.step_s([(8192, 0)], 0, 0) + xfer.ns(8192) / 1e9


def test_disaggregated_synchronised_arrivals_wait_for_half_the_burst_per_prefill_rank() -> None:
    """The pd_burst term: a request arriving with pd_burst × (C − 1) others, spread over the prefill ranks, waits for
    half of their prefills; TPOT is the decode pool's (unchanged), and the prefill-alone time sizes the wait."""
    ds, gb200 = resolve_model("deepseek-r1"), resolve_gpu("gb200")
    pre, dec, xfer = pool_step_models(ds, gb200, Parallelism(4, 1, 4), Parallelism(1, 8, 8), engine="trtllm",
                                      weights_dtype="fp4", kv_dtype="fp8")  # fmt: skip
    args = (coefficient_step(pre.coeffs), coefficient_step(dec.coeffs), _a(1024, 1024), _a(1024, 1024),
            _a(64, 64), _a(2, 4), _a(8, 8), _a(16384, 16384), _a(0.05, 0.05), _a(0.0, 0.0),
            _a(xfer.ns(1024) / 1e9, xfer.ns(1024) / 1e9))  # fmt: skip
    t0, tau0 = disaggregated(*args)
    t1, tau1 = disaggregated(*args, burst=_a(0.2, 0.2))
    assert np.allclose(tau1, tau0, rtol=0.02)
    added = t1 - t0
    assert np.all(added > 0)
    alone = pre.step_s([(1024, 0)], 0, 0)
    # 0.2 × 63 / ranks / 2 × S (the closed loop moves a little with the longer TTFT: decodes thin out)
    assert added[0] == pytest.approx(0.2 * 63 / 2 / 2 * alone, rel=0.15)
    assert added[1] == pytest.approx(added[0] / 2, rel=0.15)  # twice the prefill ranks, half the wait
    # the simulator charges the same delay at the prefill pool (the prefill worker's model)
    m = TrainedStepModel(ds, gb200, Parallelism(4, 1, 4), engine="trtllm", weights_dtype="fp4", kv_dtype="fp8",
                         efficiency=Efficiencies(pd_burst=0.2))  # fmt: skip
    expected_ns = 0.2 * 63 / 2 / 2 * m.step_s([(1024, 0)], 0, 0) * 1e9
    assert m.disagg_arrival_burst_ns(63 / 2, 1024) == pytest.approx(expected_ns, rel=1e-6)
    assert m.disagg_arrival_burst_ns(0, 1024) == 0


def test_fit_recovers_coefficients_from_synthetic_measurements() -> None:
    """Measurements made by a known set of coefficients are predicted again after fitting from the defaults."""
    llama, qwen = resolve_model("llama-3.1-8b"), resolve_model("qwen3-32b")
    h100 = resolve_gpu("h100-sxm")
    obs = [
        Observation(model, h100, "vllm", "bf16", "bf16", isl, osl, c, 1.0, 1.0, agg=Pool(Parallelism(tp)), group=g)
        for g, (model, tp) in enumerate(((llama, 1), (qwen, 2), (qwen, 4)))
        for isl in (512, 2048)
        for osl in (128, 512)
        for c in (4, 32, 128)
    ]
    ds = Dataset(obs)
    truth = fit(ds, iterations=0)  # the defaults as a parameter vector
    theta = truth.theta.copy()
    names = truth.params.names
    theta[names.index(("base", "", "", "frontend_ms"))] += 0.5  # a slower front end…
    theta[names.index(("base", "", "", "gemm"))] -= 0.4  # … and slower GEMMs than the defaults
    ttft, tpot = predict(ds, truth.params.design(ds), theta)
    made = Dataset([Observation(**{**o.__dict__, "ttft_s": a, "tpot_s": b}) if False else o for o, a, b in
                    zip(obs, ttft, tpot, strict=True)])  # fmt: skip
    made.ttft, made.tpot = ttft, tpot
    res = fit(made, iterations=30)
    p_ttft, p_tpot = predict(made, res.params.design(made), res.theta)
    assert np.mean(np.abs(p_ttft / ttft - 1)) < 0.03
    assert np.mean(np.abs(p_tpot / tpot - 1)) < 0.03


def test_the_speculative_step_prices_decodes_as_the_simulators_speculative_model() -> None:
    """``speculative_step`` (the fit's MTP runs) and ``SpeculativeStepModel`` (the simulator's ``--spec-draft``) give
    the same decode step: one round (k draft steps + a verification over n·(k+1) tokens) ÷ E tokens."""
    from tailscope.engine.closed_loop import speculative_step
    from tailscope.engine.speculative import SpecDecode, SpeculativeStepModel

    m = TrainedStepModel(resolve_model("deepseek-r1"), resolve_gpu("b200"), Parallelism(8, 1, 8), weights_dtype="fp4")
    plain = coefficient_step(m.coeffs)
    for k, p in ((1, 0.6), (3, 0.7), (3, 0.0)):
        spec = speculative_step(plain, _a(k), _a(p))
        sim = SpeculativeStepModel(m, SpecDecode(draft_tokens=k, acceptance=p))
        for n, ctx in ((1, 1500.0), (16, 1500.0), (64, 5000.0)):
            got = float(spec(_a(n), _a(ctx), _a(0), _a(0), _a(n))[0])
            want = sim.decode_step_ns(n, int(n * ctx)) / 1e9
            assert got == pytest.approx(want, rel=1e-3, abs=2e-9)
        # no drafts, or no decodes: the plain step
        assert float(speculative_step(plain, _a(0), _a(p))(_a(8), _a(900.0), _a(0), _a(0), _a(8))[0]) == pytest.approx(
            float(plain(_a(8), _a(900.0), _a(0), _a(0), _a(8))[0])
        )
        assert float(spec(_a(0), _a(0), _a(2048), _a(0), _a(1))[0]) == float(
            plain(_a(0), _a(0), _a(2048), _a(0), _a(1))[0]
        )
    # accepting every draft token makes a decode several times cheaper per token than rejecting them all
    fast = speculative_step(plain, _a(3), _a(0.999))(_a(16), _a(1500.0), _a(0), _a(0), _a(16))[0]
    slow = speculative_step(plain, _a(3), _a(0.0))(_a(16), _a(1500.0), _a(0), _a(0), _a(16))[0]
    assert fast < 0.5 * slow


def test_a_speculative_decode_iteration_is_a_round() -> None:
    """``speculative_tokens`` is E (1 without drafts); with ``tokens`` = E the aggregated loop counts the waits it
    counts in the engine's iterations (the scheduler's cadence) in rounds of E per-token steps: TTFT grows and TPOT
    does not move. The simulator's speculative model charges the same wait in
    rounds."""
    from tailscope.engine.closed_loop import speculative_step, speculative_tokens

    e = speculative_tokens(_a(0, 1, 3), _a(0.7, 0.7, 0.7))
    assert e[0] == 1.0
    assert e[1] == pytest.approx(1.7)
    assert e[2] == pytest.approx((1 - 0.7**4) / 0.3)
    m = TrainedStepModel(resolve_model("deepseek-r1"), resolve_gpu("b200"), Parallelism(8, 1, 8), weights_dtype="fp4")
    spec = speculative_step(coefficient_step(m.coeffs), _a(3), _a(0.7))
    args = (_a(1024), _a(1024), _a(16), _a(8192), _a(0.01), _a(0.0))
    kw = {"sched_iters": _a(2.0)}
    ttft1, tpot1 = aggregated(spec, *args, **kw)
    ttft_e, tpot_e = aggregated(spec, *args, **kw, tokens=_a(e[2]))
    assert ttft_e[0] > ttft1[0]
    assert tpot_e[0] == pytest.approx(tpot1[0], rel=0.02)
    # the simulator: the target's wait in its plain decode steps, stretched to rounds (E per-token steps each)
    from tailscope.engine.speculative import SpecDecode, SpeculativeStepModel

    sim = SpeculativeStepModel(m, SpecDecode(draft_tokens=3, acceptance=0.7))
    n, prompt = 16, 1024
    round_ns = sim.decode_step_ns(n, n * prompt) * e[2]
    want = m.engine_wait_ns(n, prompt) * round_ns / m.decode_step_ns(n, n * prompt)
    assert sim.engine_wait_ns(n, prompt) == pytest.approx(want, rel=1e-3)
    assert sim.pickup_wait_ns(n, prompt) == pytest.approx(
        m.pickup_wait_ns(n, prompt) * round_ns / m.decode_step_ns(n, n * prompt), rel=1e-3
    )
    assert sim.engine_wait_ns(n, prompt, prefill_pool=True) == m.engine_wait_ns(n, prompt, prefill_pool=True)


def test_batch_waiting_holds_a_prompt_at_most_its_iterations() -> None:
    from tailscope.engine.closed_loop import batch_wait

    step, isl = _a(0.01), _a(1024.0)
    # off: no iterations, no threshold, or decodes that fill the threshold by themselves
    assert batch_wait(_a(0.0), _a(14746.0), _a(4.0), isl, step, _a(1.0))[0] == 0.0
    assert batch_wait(_a(20.0), _a(0.0), _a(4.0), isl, step, _a(1.0))[0] == 0.0
    assert batch_wait(_a(20.0), _a(500.0), _a(600.0), isl, step, _a(1.0))[0] == 0.0
    # sparse arrivals: about the cap (20 iterations); a prompt never waits longer
    sparse = batch_wait(_a(20.0), _a(14746.0), _a(4.0), isl, step, _a(0.01))[0]
    assert 0.19 < sparse <= 0.2
    # arrivals that fill the threshold quickly shorten the wait; more iterations never shorten it
    rates = _a(0.1, 1.0, 10.0, 100.0)
    waits = batch_wait(_a(20.0), _a(14746.0), _a(4.0), np.full(4, 1024.0), np.full(4, 0.01), rates)
    assert np.all(np.diff(waits) < 0)
    assert np.all(waits <= 0.2)
    longer = batch_wait(_a(40.0), _a(14746.0), _a(4.0), np.full(4, 1024.0), np.full(4, 0.01), rates)
    assert np.all(longer >= waits)


def test_batch_waiting_adds_to_the_closed_loops_ttft_only() -> None:
    m = TrainedStepModel(resolve_model("llama-3.1-70b"), resolve_gpu("b200"), Parallelism(2), engine="trtllm")
    e = m.efficiency

    def run(iters: float) -> tuple[float, float]:
        t1, tau = aggregated(
            coefficient_step(m.coeffs), _a(1024), _a(1024), _a(16), _a(16384), _a(e.frontend_ms / 1e3),
            _a(e.inflight_us / 1e6), _a(e.burst), sched_iters=_a(e.sched_iters), wait_iters=_a(iters),
            wait_ratio=_a(0.9),
        )  # fmt: skip
        return float(t1[0]), float(tau[0])

    (t0, p0), (t1, p1) = run(0.0), run(20.0)
    assert t1 > t0 + 10 * p0  # held about 20 decode iterations (a few prompts arrive meanwhile)
    assert t1 < t0 + 21 * p0
    assert p1 == pytest.approx(p0, rel=0.02)


def test_balancing_waits_only_where_another_request_decodes_on_the_rank() -> None:
    """TensorRT-LLM lets context requests in at once when some rank has none decoding: a rank's only client never
    waits, two or more do (the harmonic combination of the cap and the other ranks' arrivals)."""
    from tailscope.engine.closed_loop import balance_wait

    dp, iters, step, lam = _a(8.0, 8.0, 8.0), _a(60.0, 60.0, 60.0), _a(0.02, 0.02, 0.02), _a(0.5, 0.5, 0.5)
    free = balance_wait(dp, iters, step, lam)
    waits = balance_wait(dp, iters, step, lam, _a(1.0, 1.5, 4.0))
    assert free[0] < 1.2  # at most the cap, 60 steps of 20 ms
    assert waits[0] == 0.0
    assert waits[1] == pytest.approx(0.5 * free[1])
    assert waits[2] == pytest.approx(free[2])
    assert balance_wait(_a(1.0), _a(60.0), _a(0.02), _a(0.5), _a(4.0))[0] == 0.0  # no attention DP
