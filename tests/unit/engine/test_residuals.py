"""Issue 23 item 6: prediction intervals from the step model's out-of-configuration residuals."""

from __future__ import annotations

import pytest

from tailscope.api.capacity import plan_capacity
from tailscope.api.sim import simulate
from tailscope.engine.residuals import MIN_CONFIGS, MIN_ROWS, interval, model_family, residual_group
from tailscope.engine.residuals_table import TABLE


def test_model_family() -> None:
    assert model_family("deepseek-ai/DeepSeek-R1") == "deepseek"
    assert model_family("qwen3-32b") == "qwen"
    assert model_family("meta-llama/Llama-3.1-8B-Instruct") == model_family("llama-3.1-8b") == "llama"
    assert model_family("/models/gpt-oss-120b/") == "gpt"


def test_group_falls_back_to_a_group_with_enough_rows() -> None:
    g = residual_group("vllm", "h100-sxm", "llama-3.1-8b")
    assert g is not None
    assert g.rows >= MIN_ROWS
    assert g.configurations >= MIN_CONFIGS
    assert g.key[0] in ("vllm", "*")
    assert g.key[3] == "agg"
    assert TABLE[g.key][0] == g.rows
    # an engine/GPU/family the corpus never saw still gets the engine's (or every configuration's) residuals
    odd = residual_group("vllm", "no-such-gpu", "somefamily-7b")
    assert odd is not None
    assert odd.key[1:3] == ("*", "*")
    dis = residual_group("sglang", "b200", "deepseek-r1", "disagg")
    assert dis is not None
    assert dis.key[3] == "disagg"
    lo, hi = g.bounds("ttft")
    assert 0 < lo < hi
    band = interval({"ttft": {"p50": 100.0, "p99": None}}, g)
    assert band == {"ttft": {"p50": (pytest.approx(100 * lo), pytest.approx(100 * hi))}}
    assert g.bounds("e2e")[1] >= max(g.bounds("ttft")[1], g.bounds("tpot")[1]) - 1e-12


def test_every_sim_result_carries_an_interval_and_its_source() -> None:
    out = simulate(rate=5, requests=200, input_tokens=512, output_tokens=128)
    band = out.prediction_interval
    assert band is not None
    assert set(band) == {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}
    for metric, pcts in band.items():
        for pct, (lo, hi) in pcts.items():
            value = getattr(getattr(out.summary, metric), pct)
            assert lo < hi
            assert lo <= value * 1.0001 or hi >= value  # the figure lies in or next to its band (biased model)
    src = out.prediction_interval_source
    assert src is not None
    assert src["kind"] == "residuals"
    assert src["confidence"] == 0.9
    assert "corpus rows" in src["label"]
    doc = out.to_dict()["summary"]
    assert doc["prediction_interval_source"]["group"]["mode"] == "agg"
    dis = simulate(disagg="prefill=1x1,decode=1x1", rate=5, requests=100)
    assert dis.prediction_interval_source is not None
    assert dis.prediction_interval_source["group"]["mode"] == "disagg"


def test_plan_capacity_with_confidence_needs_more_gpus_when_the_slo_is_close() -> None:
    # one GPU meets these SLOs by the point prediction, but not at the high end of the 90 % interval
    kw = {"target_rps": 20.0, "slo": ["ttft_p99=300ms", "tpot_p99=20ms"], "tp": "1", "sim_requests": 400}
    plain = plan_capacity("llama-3.1-8b", "h100-sxm", **kw)  # type: ignore[arg-type]
    sure = plan_capacity("llama-3.1-8b", "h100-sxm", confidence=True, **kw)  # type: ignore[arg-type]
    assert plain.confidence is None
    assert sure.confidence is not None
    assert sure.confidence["level"] == 0.9
    assert sure.to_dict()["confidence"]["label"] == sure.confidence["label"]
    assert plain.best is not None
    assert sure.best is not None
    assert sure.best.gpus >= plain.best.gpus  # never fewer (with the steady-state window both need 2 here)
