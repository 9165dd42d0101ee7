"""The trained step model: roofline regimes, parallelism, precisions, MoE/MLA/linear attention, scalar = vector."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tailscope.engine.engine_profiles import ENGINES, engine_profile
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.step_model import TrainedStepModel, precision_class
from tailscope.engine.step_params import TABLE, learned_efficiencies
from tailscope.engine.step_terms import (
    Efficiencies,
    Parallelism,
    chunk_sums,
    coefficients,
    step_seconds,
    step_terms,
)
from tailscope.errors import ConfigError, PlanError


def _m(
    model: str = "llama-3.1-8b", gpu: str = "h100-sxm", par: Parallelism | None = None, **kw: object
) -> TrainedStepModel:
    return TrainedStepModel(resolve_model(model), resolve_gpu(gpu), par, **kw)  # type: ignore[arg-type]


def test_learned_table_covers_every_engine_and_precision() -> None:
    for engine in ENGINES:
        for klass in ("bf16", "fp8", "fp4", "int4"):
            assert (engine, klass) in TABLE
            e = learned_efficiencies(engine, klass)
            for f in ("gemm", "moe", "attn", "mem", "comm", "kv_xfer", "burst"):
                assert 0 < getattr(e, f) <= 1, (engine, klass, f)
            for f in ("step_ms", "layer_us", "seq_us", "frontend_ms", "inflight_us", "kv_xfer_ms"):
                assert getattr(e, f) >= 0


def test_prefill_is_compute_bound_and_small_decode_memory_bound() -> None:
    m = _m()
    pf = m.breakdown([(4096, 0)], 0, 0)
    assert pf.bound == "compute"
    dec = m.breakdown([], 8, 8 * 1000)
    assert dec.bound == "memory"
    # a small decode costs about the weights read once at the achieved bandwidth (plus fixed costs)
    weights = m.weight_bytes_total / (3350e9 * m.efficiency.mem)
    assert weights < m.step_s([], 1, 100) < weights + 0.02


def test_step_time_grows_with_batch_context_and_prompt() -> None:
    m = _m()
    assert m.step_s([], 64, 64 * 4000) > m.step_s([], 64, 64 * 100) > m.step_s([], 1, 100)
    assert m.step_s([(2048, 0)], 8, 8000) > m.step_s([(512, 0)], 8, 8000) > m.step_s([], 8, 8000)
    assert m.step_s([(512, 4096)], 0, 0) > m.step_s([(512, 0)], 0, 0)  # attention over the cached part
    assert m.decode_step_ns(32, 32 * 500) == m.step_ns([], 32, 32 * 500)
    assert m.mixed_step_ns([(100, 0)], 4, 400, 5) == m.step_ns([(100, 0)], 4, 400, 5)


def test_scalar_and_vector_evaluations_agree() -> None:
    """The simulator (floats) and the fit (numpy arrays) run the same arithmetic."""
    t = step_terms(resolve_model("deepseek-r1"), resolve_gpu("b200"), Parallelism(1, 8, 8), weights_dtype="fp4")
    e = Efficiencies()
    c = coefficients(t, e)
    chunk, done = 700.0, 300.0
    pf, ps, kf, ks = chunk_sums(chunk, done, c.window)
    scalar = step_seconds(c, 16, 16 * 2000, 16 * 2000, chunk, pf, ps, kf, ks, 1, 17)
    vec = step_seconds(
        c,
        np.array([16.0, 16.0]),
        np.array([32000.0, 32000.0]),
        np.array([32000.0, 32000.0]),
        np.array([chunk, chunk]),
        np.array([pf, pf]),
        np.array([ps, ps]),
        np.array([kf, kf]),
        np.array([ks, ks]),
        np.array([1.0, 1.0]),
        np.array([17.0, 17.0]),
        maximum=np.maximum,
    )
    assert vec[0] == pytest.approx(scalar, rel=1e-12)


def test_tensor_parallelism_splits_work_and_adds_communication() -> None:
    one = _m("llama-3.1-70b", "h200")
    four = _m("llama-3.1-70b", "h200", Parallelism(tp=4))
    assert four.step_s([(4096, 0)], 0, 0) < 0.5 * one.step_s([(4096, 0)], 0, 0)
    assert one.terms.collectives == 0
    assert four.terms.collectives == 2 * 80
    # past the NVLink domain, collectives use the scale-out network
    assert resolve_gpu("h100-sxm").link_gbps(16) < resolve_gpu("h100-sxm").link_gbps(8)
    assert resolve_gpu("gb200").link_gbps(72) == resolve_gpu("gb200").interconnect_gbps


def test_collectives_past_the_nvlink_domain_use_every_nic_of_it() -> None:
    """A TP all-reduce over two HGX boards runs one ring channel per NIC (8 × 50 GB/s), not every hop through one
    NIC; an all-to-all sends only the share bound for the other board through this GPU's NIC."""
    h100, ds = resolve_gpu("h100-sxm"), resolve_model("deepseek-r1")
    assert h100.allreduce_gbps(8) == h100.interconnect_gbps
    assert h100.allreduce_gbps(16) == min(h100.interconnect_gbps, 8 * h100.scaleout_gbps)
    assert resolve_gpu("gb200").allreduce_gbps(72) == resolve_gpu("gb200").interconnect_gbps
    tp8 = step_terms(ds, h100, Parallelism(8, 1, 1), weights_dtype="fp8")
    tp16 = step_terms(ds, h100, Parallelism(16, 1, 1), weights_dtype="fp8")
    ring = 2 * ds.layers * 2.0 * ds.hidden * 2.0  # bytes a token's all-reduces move, before the (tp - 1) / tp share
    assert tp8.comm_bytes_tok / tp8.link == pytest.approx(ring * 7 / 8 / (h100.interconnect_gbps * 1e9))
    assert tp16.comm_bytes_tok / tp16.link == pytest.approx(ring * 15 / 16 / (h100.allreduce_gbps(16) * 1e9))
    # the scale-out network's latency is still paid per collective
    assert tp16.scaleout_collectives == tp16.collectives > 0 == tp8.scaleout_collectives
    wide = step_terms(ds, h100, Parallelism(1, 16, 16), weights_dtype="fp8")
    a2a = ds.moe_layers * ds.active_experts * ds.hidden * 3.0
    assert wide.comm_bytes_tok == pytest.approx(a2a * 8 / 16)  # 8 of the 15 other GPUs are on the other board


def test_fixed_costs_count_the_matmuls_and_the_routed_experts() -> None:
    """A step's fixed cost: per layer, per weight matmul (QKV and output, MLA's five or six, an MLP's two, a router and
    grouped expert pair, shared experts' two), and per MoE layer in proportion to its routed experts."""
    llama, gptoss, ds = resolve_model("llama-3.1-8b"), resolve_model("gpt-oss-120b"), resolve_model("deepseek-r1")
    assert llama.layer_matmuls == 4 * llama.layers
    assert gptoss.layer_matmuls == 5 * gptoss.layers  # attention 2, router + expert pair 3
    # MLA 6 (q_a, q_b, kv_a, absorbed K and V, output); 3 dense MLP layers 2; 58 MoE layers 3 + shared 2
    assert ds.layer_matmuls == 6 * ds.layers + 2 * ds.dense_layers + 5 * ds.moe_layers
    e = replace(Efficiencies(), step_ms=0.0, layer_us=10.0, matmul_us=1.0, moe_layer_us=4.0)
    for model, experts in ((gptoss, 128), (ds, 256)):
        t = step_terms(model, resolve_gpu("b200"), Parallelism(1, 1, 1), weights_dtype="fp8")
        assert t.routed_layers == model.moe_layers * experts / 256
        fixed = (10.0 * model.layers + model.layer_matmuls + 4.0 * model.moe_layers * experts / 256) * 1e-6
        assert coefficients(t, e).fixed == pytest.approx(fixed)


def test_expert_and_attention_data_parallelism() -> None:
    ds = resolve_model("deepseek-r1")
    b200 = resolve_gpu("b200")
    tp8 = step_terms(ds, b200, Parallelism(8, 1, 1), weights_dtype="fp8")
    ep8 = step_terms(ds, b200, Parallelism(8, 1, 8), weights_dtype="fp8")
    dp8 = step_terms(ds, b200, Parallelism(1, 8, 8), weights_dtype="fp8")
    # each GPU holds 1/8 of the experts either way; attention DP replicates attention (more dense bytes per GPU)
    assert ep8.moe_bytes_all == pytest.approx(tp8.moe_bytes_all)
    assert dp8.dense_bytes == pytest.approx(8 * tp8.dense_bytes)
    # with attention DP the experts see all ranks' tokens: 8× the expert FLOPs per token of one rank
    assert dp8.moe_tok_mult == 8
    assert dp8.moe_flops_tok == pytest.approx(8 * tp8.moe_flops_tok)
    # attention DP + EP moves tokens with all-to-all; TP all-reduces
    assert dp8.collectives == 2 * ds.moe_layers
    assert tp8.collectives == 2 * ds.layers
    # MLA latents are replicated across TP ranks, GQA heads split
    assert tp8.kv_bytes == step_terms(ds, b200, Parallelism(1, 1, 1), weights_dtype="fp8").kv_bytes
    llama = resolve_model("llama-3.1-70b")
    assert step_terms(llama, b200, Parallelism(8)).kv_bytes == step_terms(llama, b200, Parallelism(1)).kv_bytes / 8
    with pytest.raises(ConfigError, match="--ep"):
        Parallelism(4, 1, 3).validate()


def test_moe_reads_only_the_experts_its_tokens_reach() -> None:
    m = _m("deepseek-r1", "b200", Parallelism(8, 1, 8), weights_dtype="fp8", kv_dtype="fp8")
    c = m.coeffs
    one = c.moe_m * (1 - (1 - c.moe_frac) ** 1)
    many = c.moe_m * (1 - (1 - c.moe_frac) ** 512)
    assert many > 20 * one
    assert m.step_s([], 64, 64 * 2000) > m.step_s([], 1, 2000)


def test_precisions() -> None:
    b200 = resolve_gpu("b200")
    assert b200.peak_flops("fp4") == 2 * b200.peak_flops("fp8") == 4 * b200.peak_flops("bf16")
    fp8 = _m("llama-3.1-70b", "b200", Parallelism(4), weights_dtype="fp8", efficiency=Efficiencies())
    fp4 = _m("llama-3.1-70b", "b200", Parallelism(4), weights_dtype="fp4", efficiency=Efficiencies())
    assert fp4.terms.dense_peak == 2 * fp8.terms.dense_peak
    assert fp4.terms.dense_bytes < 0.6 * fp8.terms.dense_bytes
    assert precision_class("fp4", b200) == "fp4"
    assert precision_class("mxfp4", resolve_gpu("h100-sxm")) == "int4"  # no FP4 tensor cores: weight-only 4-bit
    assert precision_class("int8") == "fp8"
    # expert-only formats keep the dense parts at 16 bit
    oss = step_terms(resolve_model("gpt-oss-120b"), b200, Parallelism(1), weights_dtype="mxfp4")
    assert oss.dense_peak == b200.peak_flops("bf16")
    assert oss.moe_peak == b200.peak_flops("fp4")


def test_linear_attention_layers_keep_a_state_not_a_kv_cache() -> None:
    m = _m("qwen3.5-397b-a17b", "b200", Parallelism(8, 1, 8), weights_dtype="fp8")
    assert m.terms.kv_layers == 15
    assert m.terms.lin_bytes_seq > 0
    short, long = m.step_s([], 32, 32 * 1000), m.step_s([], 32, 32 * 100_000)
    assert long > short  # the 15 full-attention layers still read the context


def test_kv_capacity_and_fit_errors() -> None:
    cap = _m().kv_capacity_tokens(0.9)
    assert 350_000 < cap < 550_000  # 0.9 × 80 GiB − 16 GB of weights − reserve, at 128 KiB/token
    ep = _m("deepseek-r1", "b200", Parallelism(1, 8, 8), weights_dtype="fp8", kv_dtype="fp8")
    assert ep.kv_capacity_tokens() > 100_000  # per rank: its own batch's latents
    with pytest.raises(PlanError, match="--tp"):
        _m("deepseek-r1", "h100-sxm", Parallelism(2), weights_dtype="fp8").kv_capacity_tokens()
    with pytest.raises(ConfigError):
        _m().kv_capacity_tokens(1.5)


def test_tensorrt_llm_sizes_its_kv_cache_from_the_free_memory() -> None:
    """TensorRT-LLM's fraction is of what the weights and the reserve leave; vLLM's (and SGLang's) of all memory."""
    from tailscope.engine.engine_profiles import engine_profile
    from tailscope.engine.fit import corpus_kv_fraction

    kw = {"weights_dtype": "fp8", "kv_dtype": "fp8"}
    par = Parallelism(4)
    vllm = _m("deepseek-v3", "b200", par, engine="vllm", **kw)
    trt = _m("deepseek-v3", "b200", par, engine="trtllm", **kw)
    per_token = vllm.model.kv_bytes_per_token_resident("fp8")
    mem = vllm.gpu.memory_bytes
    reserve = 1.0e9 + 0.02 * mem
    weights = mem * 0.9 - reserve - vllm.kv_capacity_tokens(0.9) * per_token  # what vLLM's count leaves for them
    assert trt.kv_capacity_tokens(0.9) == pytest.approx(0.9 * (mem - weights - reserve) / per_token, rel=1e-3)
    assert trt.kv_capacity_tokens(0.9) > 10 * vllm.kv_capacity_tokens(0.9)  # the weights nearly fill the B200s
    assert engine_profile("trtllm").kv_of_free_memory
    assert not engine_profile("sglang").kv_of_free_memory
    assert (corpus_kv_fraction("trtllm"), corpus_kv_fraction("vllm"), corpus_kv_fraction("sglang")) == (0.9, 0.95, 0.95)


def test_front_end_and_synchronised_arrivals() -> None:
    m = _m(engine="sglang")
    e = m.efficiency
    assert m.frontend_delay_ns(1, 0.5) == pytest.approx(e.frontend_ms * 1e6 + e.inflight_us * 1e3, rel=1e-6)
    assert m.arrival_burst_ns(1, 1000) == 0
    assert m.arrival_burst_ns(9, 1000) == pytest.approx(e.burst * 8 * 0.5 * m.step_s([(1000, 0)], 0, 0) * 1e9, rel=1e-6)
    assert m.arrival_burst_ns(9, 4000) > m.arrival_burst_ns(9, 1000)
    assert m.balance_wait_ns(9, 1000) == 0  # SGLang does not hold context requests


def test_attention_dp_balancing_is_apart_from_the_closed_loop_burst() -> None:
    """TensorRT-LLM's attention-DP balancing is an engine wait (every arrival); the burst is only the synchrony."""
    par = Parallelism(1, 8, 8)
    trt = _m("deepseek-r1", "b200", par, weights_dtype="fp8", kv_dtype="fp8", engine="trtllm")
    e = trt.efficiency
    assert trt.balance_wait_ns(9, 1000) == int(e.dp_wait * trt.decode_step_ns(9, 9 * 1000))
    assert trt.balance_wait_ns(9, 1000, prefill_pool=True) == int(e.dp_wait * trt.step_ns([], 0, 0))
    assert trt.arrival_burst_ns(9, 1000) == int(e.burst * 8 * 0.5 * trt.step_s([(1000, 0)], 0, 0) * 1e9)
    assert trt.disagg_arrival_burst_ns(0, 1000) == 0  # no balancing folded into the synchrony terms
    vllm = _m("deepseek-r1", "b200", par, weights_dtype="fp8", kv_dtype="fp8", engine="vllm")
    assert vllm.balance_wait_ns(9, 1000) == 0
    assert _m(engine="trtllm").balance_wait_ns(9, 1000) == 0  # no attention DP: nothing to balance


def test_the_engine_takes_requests_in_at_its_own_cadence() -> None:
    """Every engine charges ``sched_iters`` decode steps before its scheduler takes a request in (SGLang the most:
    it reads its input every few iterations); a disaggregated prefill pool leaves it to the decode worker."""
    for engine in ENGINES:
        m = _m(engine=engine)
        e = m.efficiency
        assert e.sched_iters > 0
        assert m.pickup_wait_ns(9, 1000) == int(e.sched_iters * m.decode_step_ns(9, 9 * 1000))
        assert m.engine_wait_ns(9, 1000) == pytest.approx(m.pickup_wait_ns(9, 1000) + m.balance_wait_ns(9, 1000), abs=1)
        assert m.engine_wait_ns(9, 1000, prefill_pool=True) == m.balance_wait_ns(9, 1000, prefill_pool=True) == 0
        assert m.pickup_wait_ns(64, 1000) > m.pickup_wait_ns(1, 1000)  # longer steps, longer wait
    assert _m(engine="sglang").efficiency.sched_iters > _m(engine="vllm").efficiency.sched_iters
    trt = _m("deepseek-r1", "b200", Parallelism(1, 8, 8), weights_dtype="fp8", kv_dtype="fp8", engine="trtllm")
    assert trt.engine_wait_ns(9, 1000) == pytest.approx(
        trt.pickup_wait_ns(9, 1000) + trt.balance_wait_ns(9, 1000), abs=2
    )
    assert trt.engine_wait_ns(9, 1000, prefill_pool=True) == trt.balance_wait_ns(9, 1000, prefill_pool=True) > 0


def test_collectives_across_nvlink_domains_pay_the_scale_out_latency() -> None:
    """Tensor parallelism over two HGX boards (16 H100s) crosses the scale-out network on every all-reduce; the same
    16 GPUs inside one GB200 NVL72 domain do not."""
    from tailscope.engine.step_terms import step_terms

    ds = resolve_model("deepseek-r1")
    h100, gb200 = resolve_gpu("h100-sxm"), resolve_gpu("gb200")
    wide = step_terms(ds, h100, Parallelism(16), weights_dtype="fp8", kv_dtype="fp8")
    assert wide.scaleout_collectives == wide.collectives == 2 * ds.layers
    assert step_terms(ds, h100, Parallelism(8), weights_dtype="fp8", kv_dtype="fp8").scaleout_collectives == 0
    assert step_terms(ds, gb200, Parallelism(16), weights_dtype="fp4", kv_dtype="fp8").scaleout_collectives == 0
    a2a = step_terms(ds, h100, Parallelism(1, 16, 16), weights_dtype="fp8", kv_dtype="fp8")  # EP all-to-all
    assert a2a.scaleout_collectives == 2 * ds.moe_layers
    m16 = _m("deepseek-r1", "h100-sxm", Parallelism(16), weights_dtype="fp8", kv_dtype="fp8")
    e = m16.efficiency
    slower = replace(e, scaleout_lat_us=e.scaleout_lat_us + 100.0)
    m_slow = _m("deepseek-r1", "h100-sxm", Parallelism(16), weights_dtype="fp8", kv_dtype="fp8", efficiency=slower)
    gap = m_slow.decode_step_ns(8, 8000) - m16.decode_step_ns(8, 8000)
    assert gap == pytest.approx(2 * ds.layers * 100e3, rel=1e-3)  # 100 µs more on each of the step's collectives


def test_engine_profiles() -> None:
    h100, b200 = resolve_gpu("h100-sxm"), resolve_gpu("b200")
    assert engine_profile("vllm").limits(h100) == (1024, 8192)
    assert engine_profile("vllm").limits(resolve_gpu("l4")) == (256, 2048)
    assert engine_profile("sglang").limits(b200)[1] == 16384
    assert engine_profile("trtllm").cuda_graph_max_batch == 128
    with pytest.raises(ConfigError, match="--engine"):
        engine_profile("tgi")


@pytest.mark.parametrize(
    ("model", "gpu", "par", "dtype"),
    [
        ("llama-3.1-8b", "h100-sxm", Parallelism(), None),
        ("deepseek-r1", "b200", Parallelism(1, 8, 8), "fp4"),
        ("gpt-oss-120b", "h200", Parallelism(2), None),
        ("qwen3.5-397b-a17b", "b300", Parallelism(4, 1, 4), "fp8"),
    ],
)
def test_the_simulators_fast_paths_equal_the_general_formula(
    model: str, gpu: str, par: Parallelism, dtype: str | None
) -> None:
    import random

    m = _m(model, gpu, par, weights_dtype=dtype)
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(0, 600)
        ctx = n * rng.randint(1, 9000)
        if n:
            assert m.decode_step_ns(n, ctx) == m.step_ns([], n, ctx)
        pre = [(rng.randint(1, 4000), rng.randint(0, 20_000)) for _ in range(rng.randint(1, 4))]
        logits = n + rng.randint(0, len(pre))
        assert m.mixed_step_ns(pre, n, ctx, logits) == m.step_ns(pre, n, ctx, logits)
