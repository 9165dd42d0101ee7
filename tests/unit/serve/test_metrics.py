"""/metrics text: vLLM names, labels and buckets; valid Prometheus exposition; counts consistent."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailscope.engine.api import EngineStats
from tailscope.serve.metrics import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    CacheInfo,
    Histogram,
    ServeMetrics,
    build_1_2_5_buckets,
    format_value,
)

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse(text: str) -> dict[str, float]:
    """Sample lines as ``name{labels}`` → value; checks every line is valid exposition format."""
    out: dict[str, float] = {}
    types: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in {"counter", "gauge", "histogram"}
            assert name not in types, f"duplicate TYPE for {name}"
            types[name] = kind
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a valid sample line: {line!r}"
        key = line.rsplit(" ", 1)[0]
        assert key not in out, f"duplicate sample {key}"
        out[key] = float(m.group(4))
    return out


def test_vllm_bucket_boundaries() -> None:
    assert len(TTFT_BUCKETS) == 22
    assert TTFT_BUCKETS[0] == 0.001
    assert TTFT_BUCKETS[-1] == 2560.0
    assert len(ITL_BUCKETS) == 19
    assert ITL_BUCKETS[0] == 0.01
    assert ITL_BUCKETS[-1] == 80.0
    assert len(REQUEST_LATENCY_BUCKETS) == 21
    assert REQUEST_LATENCY_BUCKETS[-1] == 7680.0
    assert 2.0 not in TTFT_BUCKETS  # vLLM has 1.0 then 2.5
    assert build_1_2_5_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert build_1_2_5_buckets(4096)[-1] == 2000


def test_format_value_like_prometheus_client() -> None:
    assert format_value(1) == "1.0"
    assert format_value(0.001) == "0.001"
    assert format_value(math.inf) == "+Inf"
    assert format_value(float("nan")) == "NaN"


def test_histogram_le_is_inclusive() -> None:
    h = Histogram((0.1, 0.5))
    for v in (0.05, 0.1, 0.2, 0.5, 0.7):
        h.observe(v)
    lines: list[str] = []
    h.render("x", (("a", "b"),), lines)
    assert lines == [
        'x_bucket{a="b",le="0.1"} 2.0',
        'x_bucket{a="b",le="0.5"} 4.0',
        'x_bucket{a="b",le="+Inf"} 5.0',
        'x_count{a="b"} 5.0',
        'x_sum{a="b"} 1.55',
    ]


@given(st.lists(st.floats(0, 5000, allow_nan=False), max_size=60))
def test_histogram_cumulative_and_monotone(values: list[float]) -> None:
    h = Histogram(TTFT_BUCKETS)
    for v in values:
        h.observe(v)
    lines: list[str] = []
    h.render("t", (), lines)
    counts = [float(line.rsplit(" ", 1)[1]) for line in lines if "_bucket" in line]
    assert counts == sorted(counts)
    assert counts[-1] == len(values) == h.count
    for bound, line in zip((*TTFT_BUCKETS, math.inf), lines, strict=False):
        assert float(line.rsplit(" ", 1)[1]) == sum(v <= bound for v in values)


def test_render_names_labels_and_values() -> None:
    m = ServeMetrics("llama-3.1-8b", max_model_len=8192, cache=CacheInfo(block_size=16, num_gpu_blocks=1000))
    m.ttft.observe(0.05)
    m.itl.observe(0.02)
    m.itl.observe(0.03)
    m.observe_finished(reason="length", e2e_s=0.4, prompt_tokens=100, generation_tokens=3, max_tokens=3, decode_s=0.05)
    m.observe_finished(reason="abort", e2e_s=0.1, prompt_tokens=10, generation_tokens=1, max_tokens=None)
    stats = EngineStats(
        running=3, waiting=2, kv_usage=0.25, kv_blocks_total=1000, prefix_queries_tokens=640,
        prefix_hits_tokens=320, preemptions=4, prompt_tokens_total=110, generation_tokens_total=4,
    )  # fmt: skip
    samples = parse(m.render(stats))
    lab = '{model_name="llama-3.1-8b",engine="0"}'
    assert samples["vllm:num_requests_running" + lab] == 3
    assert samples["vllm:num_requests_waiting" + lab] == 2
    assert samples["vllm:kv_cache_usage_perc" + lab] == 0.25
    assert samples["vllm:prefix_cache_queries_total" + lab] == 640
    assert samples["vllm:prefix_cache_hits_total" + lab] == 320
    assert samples["vllm:num_preemptions_total" + lab] == 4
    assert samples["vllm:prompt_tokens_total" + lab] == 110
    assert samples["vllm:generation_tokens_total" + lab] == 4
    for reason, n in (("stop", 0), ("length", 1), ("abort", 1)):
        assert (
            samples[f'vllm:request_success_total{{model_name="llama-3.1-8b",engine="0",finished_reason="{reason}"}}']
            == n
        )
    assert samples["vllm:time_to_first_token_seconds_count" + lab] == 1
    assert samples['vllm:time_to_first_token_seconds_bucket{model_name="llama-3.1-8b",engine="0",le="0.04"}'] == 0
    assert samples['vllm:time_to_first_token_seconds_bucket{model_name="llama-3.1-8b",engine="0",le="0.06"}'] == 1
    assert samples["vllm:inter_token_latency_seconds_count" + lab] == 2
    assert samples["vllm:inter_token_latency_seconds_sum" + lab] == pytest.approx(0.05)
    assert samples["vllm:request_time_per_output_token_seconds_count" + lab] == 1  # the finished one, not the abort
    assert samples["vllm:e2e_request_latency_seconds_count" + lab] == 2
    assert samples["vllm:request_params_max_tokens_count" + lab] == 1
    info = [k for k in samples if k.startswith("vllm:cache_config_info")]
    assert len(info) == 1
    assert 'block_size="16"' in info[0]
    assert 'num_gpu_blocks="1000"' in info[0]
    assert samples[info[0]] == 1.0


def test_label_values_are_escaped() -> None:
    m = ServeMetrics('we"ird\\name', max_model_len=100)
    text = m.render(EngineStats())
    parse(text)
    assert 'model_name="we\\"ird\\\\name"' in text
