"""Planning arithmetic: KV numbers, napkin capacity, cost, budgets, estimates (regimes and monotonicity)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.perf import StepTimeModel
from tailscope.errors import PlanError
from tailscope.plan.budget import budget_from_shares, plan_budget
from tailscope.plan.estimate import estimate_request
from tailscope.plan.kv import plan_kv
from tailscope.plan.napkin import napkin_capacity, plan_cost


@pytest.mark.parametrize(
    ("model", "dtype", "expected"),
    [
        ("llama-2-7b", "bf16", 524_288),
        ("llama-3.1-70b", "bf16", 327_680),
        ("opt-13b", "bf16", 819_200),
        ("llama-3.1-70b", "fp8", 163_840),
        ("llama-3.1-8b", "bf16", 131_072),
    ],
)
def test_kv_bytes_per_token(model: str, dtype: str, expected: int) -> None:
    p = plan_kv(resolve_model(model), context=8192, kv_dtype=dtype)
    assert p.bytes_per_token == expected
    assert p.per_sequence_bytes == expected * 8192


def test_kv_capacity_and_concurrency_on_a_gpu() -> None:
    p = plan_kv(resolve_model("llama-3.1-70b"), context=8192, kv_dtype="fp8", gpu=resolve_gpu("h100-sxm"), tp=4)
    assert p.kv_capacity_tokens is not None
    assert p.max_sequences == p.kv_capacity_tokens // 8192
    assert p.max_sequences > 10
    assert any("KV capacity" in a for a in p.assumptions)


def test_tensorrt_llm_kv_capacity_is_a_fraction_of_the_free_memory() -> None:
    """`plan kv --engine trtllm`: DeepSeek-V3 in FP8 on four B200s, where vLLM's rule leaves no room at 0.9."""
    kw = {"context": 9216, "kv_dtype": "fp8", "weights_dtype": "fp8", "gpu": resolve_gpu("b200"), "tp": 4}
    with pytest.raises(PlanError, match="leaves no room for the KV cache"):
        plan_kv(resolve_model("deepseek-v3"), **kw)  # type: ignore[arg-type]
    p = plan_kv(resolve_model("deepseek-v3"), engine="trtllm", **kw)  # type: ignore[arg-type]
    assert p.max_sequences is not None
    assert p.max_sequences >= 16  # the corpus ran 16 such requests on that deployment
    assert any("from the free memory" in a for a in p.assumptions)
    small = {"context": 8192, "kv_dtype": "fp8", "gpu": resolve_gpu("h100-sxm"), "tp": 4}
    vllm = plan_kv(resolve_model("llama-3.1-70b"), **small).kv_capacity_tokens  # type: ignore[arg-type]
    trt = plan_kv(resolve_model("llama-3.1-70b"), engine="trtllm", **small).kv_capacity_tokens  # type: ignore[arg-type]
    assert vllm is not None
    assert trt is not None
    # u × (M − W − R) − (u × M − W − R) = (1 − u)(W + R) ≥ 0: never less, and with room to spare not much more
    assert vllm <= trt < 1.2 * vllm


def test_model_that_does_not_fit_is_explained() -> None:
    with pytest.raises(PlanError, match="leaves no room for the KV cache"):
        plan_kv(resolve_model("llama-3.1-70b"), context=4096, gpu=resolve_gpu("l4"), tp=1)


def test_context_above_model_maximum_is_explained() -> None:
    with pytest.raises(PlanError, match=r"above .* maximum context"):
        plan_kv(resolve_model("llama-2-7b"), context=8192, max_context=4096)


def test_napkin_example_from_the_issue() -> None:
    n = napkin_capacity(100, 25, 1400, headroom=0.2)
    assert n.required_tokens_s == 2500
    assert n.gpus_without_headroom == 2
    assert n.with_headroom_tokens_s == pytest.approx(3000)
    assert n.gpus == 3


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=10_000),
    st.floats(min_value=0.1, max_value=100),
    st.floats(min_value=10, max_value=50_000),
    st.floats(min_value=0, max_value=2),
    st.integers(min_value=1, max_value=1000),
)
def test_more_load_never_needs_fewer_gpus(users: int, tpu: float, gpu: float, headroom: float, extra: int) -> None:
    assert napkin_capacity(users + extra, tpu, gpu, headroom).gpus >= napkin_capacity(users, tpu, gpu, headroom).gpus
    assert napkin_capacity(users, tpu, gpu, headroom + 0.1).gpus >= napkin_capacity(users, tpu, gpu, headroom).gpus


def test_cost_arithmetic_and_break_even() -> None:
    c = plan_cost(
        gpus=2,
        gpu_price_per_hour=2.5,
        output_tokens_per_s=2000,
        requests_per_s=10,
        mean_input_tokens=500,
        mean_output_tokens=200,
        source="test",
        api_price_in=0.15,
        api_price_out=0.60,
        daily_requests=500_000,
    )
    # 2 GPUs × 2.5 $/h = 5 $/h = 1/720 $/s; / 2000 tok/s × 1e6
    assert c.usd_per_million_output_tokens == pytest.approx(5 / 3600 / 2000 * 1e6)
    assert c.usd_per_request == pytest.approx(5 / 3600 / 10)
    assert c.api_usd_per_request == pytest.approx(500 * 0.15e-6 + 200 * 0.60e-6)
    assert c.break_even_daily_requests == pytest.approx(120 / c.api_usd_per_request)
    # 500k/day = 5.79 req/s ≤ 10 → one fleet
    assert c.gpus_for_daily == 2
    assert c.self_host_usd_per_day == pytest.approx(120)
    assert c.api_usd_per_day == pytest.approx(500_000 * c.api_usd_per_request)


def test_budget_arithmetic_and_contract() -> None:
    b = plan_budget(300, [("gateway", 50), ("inference", 120), ("retrieval", 80), ("network", 50)], buffer=0.2)
    assert b.usable_ms == pytest.approx(240)
    assert b.allocated_ms == 300
    assert b.over_by_ms == pytest.approx(60)
    assert not b.ok
    assert "60 ms over" in b.findings[0]
    ok = plan_budget(300, [("gateway", 40), ("inference", 120), ("retrieval", 80)], buffer=0.2)
    assert ok.ok
    contract = ok.contract()
    assert contract["slo"] == [{"metric": "e2e_ms", "percentile": "p99", "max": 300}]
    assert {"layer": "retrieval", "percentile": "p99", "max_ms": 80} in contract["layers"]
    measured = plan_budget(300, [("retrieval", 80)], measured_p99_ms={"retrieval": 95})
    assert not measured.ok
    assert "retrieval: measured p99 95 ms exceeds" in measured.findings[0]
    with pytest.raises(PlanError, match="unknown layer"):
        plan_budget(300, [("database", 10)])


def test_budget_from_shares_is_proportional() -> None:
    b = budget_from_shares(1000, {"inference": 0.6, "retrieval": 0.3, "gateway": 0.1}, buffer=0.1)
    got = {lb.layer: lb.budget_ms for lb in b.layers}
    assert got == pytest.approx({"inference": 540, "retrieval": 270, "gateway": 90})
    assert b.ok


def test_estimate_regimes_prefill_compute_decode_memory() -> None:
    perf = StepTimeModel(resolve_model("llama-3.1-8b"), resolve_gpu("a100-80gb"))
    e = estimate_request(perf, input_tokens=2000, output_tokens=300, concurrency=1)
    assert e.prefill_bound == "compute"
    assert e.decode_bound == "memory"
    assert e.e2e_ms == pytest.approx(e.ttft_ms + 299 * e.tpot_ms)
    # 16 GB of bf16 weights at ~2 TB/s × MBU: single-sequence decode is several ms per token
    assert 5 < e.tpot_ms < 20


def test_estimate_monotone_in_concurrency() -> None:
    perf = StepTimeModel(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    prev = None
    for c in (1, 4, 16, 64):
        e = estimate_request(perf, input_tokens=500, output_tokens=200, concurrency=c)
        if prev is not None:
            assert e.tpot_ms >= prev.tpot_ms
            assert e.output_tokens_per_s >= prev.output_tokens_per_s
        prev = e


def test_budget_per_layer_buffer_reproduces_the_method() -> None:
    # ../shared/method/003 §2.2: 300 ms end to end, gateway 50 / LLM 120 / vector search 80 / serialisation and
    # network 50 ms, "each segment keeps a 20 % buffer" → LLM P99 ≤ 100 ms.
    layers = [("gateway", 50.0), ("inference", 120.0), ("retrieval", 80.0), ("network", 50.0)]
    b = plan_budget(300, layers, buffer=0.0, buffer_per_layer=0.2)
    assert b.ok
    assert b.over_by_ms == 0
    buffered = {lb.layer: lb.buffered_ms for lb in b.layers}
    assert buffered["inference"] == pytest.approx(100)
    assert buffered["retrieval"] == pytest.approx(80 / 1.2)
    contract = b.contract()
    assert {"layer": "inference", "percentile": "p99", "max_ms": 100.0} in contract["layers"]
    doc = b.to_dict()
    assert doc["buffer_per_layer"] == 0.2
    assert {lb["layer"]: lb["buffered_ms"] for lb in doc["layers"]}["inference"] == pytest.approx(100)
    # a measured inference p99 of 110 ms fits 120 but not the buffered 100
    tight = plan_budget(300, layers, buffer=0.0, buffer_per_layer=0.2, measured_p99_ms={"inference": 110})
    assert not tight.ok
    assert "100 ms buffered budget" in tight.findings[0]
    # layers that add up to more than the target cannot hold
    assert not plan_budget(300, [*layers, ("business", 10.0)], buffer=0.0, buffer_per_layer=0.2).ok


def test_cached_token_pricing_and_operations_in_the_break_even() -> None:
    from tailscope.plan.napkin import CachedPricing

    # reads at 0.1×, writes at 1.25× of the input price (../shared/method: cached-token pricing, issue 24 item 5)
    cache = CachedPricing(cached_share=0.6, write_share=0.2)
    assert cache.input_multiplier() == pytest.approx(0.2 + 0.6 * 0.1 + 0.2 * 1.25)
    common = dict(gpus=2, gpu_price_per_hour=2.5, output_tokens_per_s=2000, requests_per_s=10, mean_input_tokens=500,
                  mean_output_tokens=200, source="test", api_price_in=0.15, api_price_out=0.60)  # fmt: skip
    plain = plan_cost(**common)
    cached = plan_cost(**common, cached=cache)
    assert cached.api_usd_per_million_input_effective == pytest.approx(0.15 * 0.51)
    assert cached.api_usd_per_request == pytest.approx(500 * 0.15e-6 * 0.51 + 200 * 0.60e-6)
    assert cached.break_even_daily_requests > plain.break_even_daily_requests  # a cheaper API moves it out
    ops = plan_cost(**common, ops_usd_per_month=3000, daily_requests=500_000)
    # the fleet's 120 $/day plus 3000/30 = 100 $/day of operations
    assert ops.break_even_daily_requests == pytest.approx(220 / ops.api_usd_per_request)
    assert ops.self_host_usd_per_day == pytest.approx(220)
    with pytest.raises(PlanError, match="cannot exceed 1"):
        plan_cost(**common, cached=CachedPricing(0.8, 0.3))


def test_unit_cost_per_million_tokens_from_a_day() -> None:
    from tailscope.plan.napkin import unit_cost

    # the method (001 §4.1): a day's token total, GPU-hours and the bill → USD per 1M tokens
    u = unit_cost(tokens_per_day=2e9, gpu_hours=192, gpu_price=2.5)
    assert u.bill_usd == pytest.approx(480)
    assert u.usd_per_million_tokens == pytest.approx(0.24)
    assert u.tokens_per_gpu_hour == pytest.approx(2e9 / 192)
    billed = unit_cost(tokens_per_day=2e9, gpu_hours=192, bill=600)  # the bill wins over GPU-hours × price
    assert billed.usd_per_million_tokens == pytest.approx(0.30)
    with pytest.raises(PlanError, match="--bill"):
        unit_cost(tokens_per_day=2e9)


def test_napkin_uses_the_slo_rate_per_stream() -> None:
    from tailscope.plan.napkin import stream_rate_for_slo

    # the method (001 §4.2): P95 within 8 s over 350 output tokens → about 45 tok/s per stream
    rate, _ = stream_rate_for_slo(350, 8.0)
    assert rate == pytest.approx(43.75)
    rate_ttft, text = stream_rate_for_slo(350, 8.0, 0.2)
    assert round(rate_ttft) == 45
    n = napkin_capacity(100, 25, 1400, headroom=0.2, slo_rate=(rate_ttft, text))
    assert n.tokens_per_user_s == pytest.approx(rate_ttft)  # the SLO's rate beats the 25 tok/s assumed
    assert n.gpus == 4  # 100 × 44.9 × 1.2 = 5385 tok/s over 1400 per GPU
    assert "≥ 45 tok/s per stream" in n.steps()[0]
    assert napkin_capacity(100, 60, 1400, slo_rate=(rate_ttft, text)).tokens_per_user_s == 60


def test_budget_judged_on_the_tail_critical_path_not_each_layers_own_p99() -> None:
    """Issue 28 item 5: each layer is held to what it adds to the tail traces' end-to-end time; the layers' own p99s
    (from different traces) add up to more than any request waits and must not mark them over budget."""
    from tailscope.plan.budget import TailFacts

    tail = TailFacts(layer_ms={"inference": 1960, "business": 248, "retrieval": 206}, e2e_p99_ms=2240,
                     tail_e2e_ms=2414, traces=20)  # fmt: skip
    own_p99 = {"inference": 2000, "business": 372, "retrieval": 407}
    shares = {k: v / 2414 for k, v in tail.layer_ms.items()}
    fine = budget_from_shares(4000, shares, measured_p99_ms=own_p99, tail=tail)
    assert fine.ok
    assert not fine.findings
    assert all(lb.holds for lb in fine.layers)
    tight = budget_from_shares(2000, shares, measured_p99_ms=own_p99, tail=tail)
    assert not tight.ok
    assert tight.findings[0].startswith("the trace set's end-to-end p99 is 2240 ms")
    explicit = plan_budget(4000, [("inference", 2500), ("business", 200)], tail=tail)
    assert [lb.layer for lb in explicit.layers if lb.holds is False] == ["business"]
    assert explicit.unbudgeted == ("retrieval",)
    assert not explicit.ok


def test_an_estimate_of_attention_dp_ranks_is_one_ranks_request_and_every_ranks_throughput() -> None:
    """``plan_estimate(attention_dp=8)``: the request's times are those of one rank (TP 1, the experts over the eight)
    holding its share of the concurrency; the replica's throughput is the eight ranks'. The engine is the one asked."""
    from tailscope.api.plan import perf_model, plan_estimate
    from tailscope.errors import ConfigError

    args = {"input_tokens": 1024, "output_tokens": 1024}
    dp = plan_estimate("deepseek-r1", "b200", concurrency=64, tp=1, ep=8, attention_dp=8, engine="sglang", **args)
    rank = estimate_request(
        perf_model("deepseek-r1", "b200", tp=1, ep=8, attention_dp=8, engine="sglang"), concurrency=8, **args
    )
    assert (dp.ttft_ms, dp.tpot_ms, dp.e2e_ms) == (rank.ttft_ms, rank.tpot_ms, rank.e2e_ms)
    assert dp.concurrency == 64
    assert dp.requests_per_s == pytest.approx(8 * rank.requests_per_s)
    assert dp.output_tokens_per_s == pytest.approx(8 * rank.output_tokens_per_s)
    assert any("8 attention-DP ranks" in a for a in dp.assumptions)
    uneven = plan_estimate("deepseek-r1", "b200", concurrency=60, tp=1, ep=8, attention_dp=8, engine="sglang", **args)
    assert uneven.tpot_ms == rank.tpot_ms  # the busiest rank holds 8 of the 60
    assert uneven.requests_per_s == pytest.approx(60 / 8 * rank.requests_per_s)
    vllm = plan_estimate("deepseek-r1", "b200", concurrency=64, tp=8, ep=8, **args)
    sglang = plan_estimate("deepseek-r1", "b200", concurrency=64, tp=8, ep=8, engine="sglang", **args)
    assert vllm.ttft_ms != sglang.ttft_ms  # each engine's learned costs
    with pytest.raises(ConfigError, match="--ep 3"):
        plan_estimate("deepseek-r1", "b200", tp=1, ep=3, attention_dp=8, **args)
    with pytest.raises(ConfigError, match="--attention-dp must be ≥ 1"):
        plan_estimate("llama-3.1-8b", "b200", attention_dp=0, **args)
