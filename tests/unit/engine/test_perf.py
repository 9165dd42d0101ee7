"""Step-time model: roofline regimes, TP and calibration overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.engine.calibration import Efficiency
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.perf import StepTimeModel
from tailscope.errors import ConfigError, PlanError
from tailscope.io.calibration import load_calibration


def _model(name: str = "llama-3.1-8b", gpu: str = "h100-sxm", **kw: object) -> StepTimeModel:
    return StepTimeModel(resolve_model(name), resolve_gpu(gpu), **kw)  # type: ignore[arg-type]


def test_prefill_is_compute_bound_and_small_decode_memory_bound() -> None:
    m = _model()
    prefill = m.breakdown([(4096, 0)], 0, 0)
    assert prefill.bound == "compute"
    assert prefill.compute_s > 3 * prefill.memory_s
    decode = m.breakdown([], 8, 8 * 1000)
    assert decode.bound == "memory"
    assert decode.memory_s > 10 * decode.compute_s
    # a decode step reads the weights once and every sequence's KV: bytes / achieved bandwidth
    expected = (m.weight_bytes_total + 8 * 1000 * m.kv_bytes_per_token) / (3350e9 * m.eff.mbu)
    assert decode.memory_s == pytest.approx(expected, rel=0.05)


def test_decode_time_grows_with_batch_and_context() -> None:
    m = _model()
    assert m.step_s([], 64, 64 * 4000) > m.step_s([], 64, 64 * 100) > m.step_s([], 1, 100)
    assert m.decode_step_ns(32, 32 * 500) == m.step_ns([], 32, 32 * 500)


def test_tensor_parallel_splits_work_and_adds_allreduce() -> None:
    one = _model("llama-3.1-70b", "h200")
    four = _model("llama-3.1-70b", "h200", tp=4)
    b1, b4 = one.breakdown([(2048, 0)], 0, 0), four.breakdown([(2048, 0)], 0, 0)
    assert b4.compute_s == pytest.approx(b1.compute_s / 4, rel=0.01)
    assert b1.allreduce_s == 0
    assert b4.allreduce_s > 0


def test_fp8_uses_fp8_peak_and_halves_weight_reads() -> None:
    bf = _model()
    f8 = _model(weights_dtype="fp8")
    assert f8.breakdown([(4096, 0)], 0, 0).compute_s == pytest.approx(
        bf.breakdown([(4096, 0)], 0, 0).compute_s / 2, rel=0.01
    )
    assert f8.breakdown([], 1, 100).memory_s < 0.6 * bf.breakdown([], 1, 100).memory_s


def test_moe_reads_only_touched_experts() -> None:
    m = _model("mixtral-8x7b", "h100-sxm", tp=2)
    one_token = m.breakdown([], 1, 100).memory_s
    many = m.breakdown([], 256, 256 * 100).memory_s
    assert many > one_token * 2  # 1 token touches 2 of 8 experts, 256 tokens touch all of them


def test_kv_capacity_and_fit_errors() -> None:
    m = _model()
    cap = m.kv_capacity_tokens(0.9)
    # 0.9 × 80 GB − 16 GB weights − reserve, at 128 KiB/token → about 400k tokens
    assert 350_000 < cap < 500_000
    with pytest.raises(PlanError, match="--tp"):
        _model("llama-3.1-70b", "l4").kv_capacity_tokens(0.9)
    with pytest.raises(ConfigError):
        m.kv_capacity_tokens(1.5)


def test_calibration_file_layers(tmp_path: Path) -> None:
    f = tmp_path / "cal.yaml"
    f.write_text(
        "default: {mfu: 0.4}\ngpus:\n  h100-sxm: {mbu: 0.7}\npairs:\n  llama-3.1-8b@h100-sxm: {mfu: 0.3}\n",
        encoding="utf-8",
    )
    cal = load_calibration(f)
    assert cal.efficiency("l4").mfu == 0.4
    eff = cal.efficiency("h100-sxm", "llama-3.1-8b")
    assert (eff.mfu, eff.mbu) == (0.3, 0.7)
    assert load_calibration(None).efficiency("h100-sxm") == Efficiency()
    f.write_text("default: {mfu: 2}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mfu"):
        load_calibration(f)
    f.write_text("default: {speed: 2}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="speed"):
        load_calibration(f)


def test_frontend_jitter_spreads_the_requests_of_a_seed_0_workload() -> None:
    """Workload seeds are base + id (base 0 at seed 0): the jitter must still differ per request and be uniform."""
    from statistics import mean

    from tailscope.engine.perf import frontend_jitter

    us = [frontend_jitter(0 * 1_000_003 + i, i) for i in range(2000)]
    assert len(set(us)) > 1900
    assert all(0.0 <= u < 1.0 for u in us)
    assert abs(mean(us) - 0.5) < 0.03
    assert sum(u < 0.1 for u in us) / len(us) == pytest.approx(0.1, abs=0.03)
    assert frontend_jitter(7, 3) == frontend_jitter(7, 3)  # deterministic
