"""Every diagnosis rule on a crafted run that triggers it and on one that does not."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from gate_factory import gauge, record

from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status
from tailscope.report.verify import findings_text
from tailscope.verify.diagnose import RULES, Diagnosis, diagnose

N = 200
STEP_MS = 100.0


def healthy_records(n: int = N, *, seed: int = 0, **overrides: object) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kw: dict[str, object] = {
            "sched_ms": i * STEP_MS,
            "ttft_ms": float(80 + 10 * rng.random()),
            "tpot_ms": float(20 + rng.random()),
            "n_out": int(14 + rng.integers(0, 4)),
            "lag_ms": 0.5,
        }
        kw.update({k: (v(i) if callable(v) else v) for k, v in overrides.items()})
        out.append(record(i, **kw))  # type: ignore[arg-type]
    return out


def healthy_samples(seconds: int = 25) -> list[ServerSample]:
    return (
        gauge("vllm:num_requests_waiting", [0] * seconds)
        + gauge("vllm:num_requests_running", [2] * seconds)
        + gauge("vllm:kv_cache_usage_perc", [0.3] * seconds)
        + gauge("vllm:num_preemptions_total", [0] * seconds)
    )


def rules_fired(records: Sequence[RequestRecord], samples: Sequence[ServerSample] = (), **kw: object) -> set[str]:
    return {f.rule for f in diagnose(records, samples, **kw)}  # type: ignore[arg-type]


def test_healthy_run_has_no_findings() -> None:
    findings = diagnose(healthy_records(), healthy_samples(), trace=HEALTHY_TRACE)
    assert findings == []
    assert "no findings" in findings_text(Diagnosis("r1", tuple(findings)))


def test_saturation() -> None:
    rising = healthy_records(ttft_ms=lambda i: 100.0 + 10.0 * i)
    queue = gauge("vllm:num_requests_waiting", [s for s in range(25)])
    fired = diagnose(rising, queue)
    sat = next(f for f in fired if f.rule == "saturation")
    assert "waiting queue > 0" in sat.evidence[0]
    assert any("median TTFT rose" in e for e in sat.evidence)
    assert "saturation" not in rules_fired(healthy_records(), queue)  # queue but flat TTFT, r small


def test_saturation_with_the_backlog_admitted() -> None:
    """No waiting queue, but the requests in flight and TTFT grow to the end: the engine admitted the backlog."""
    rising = healthy_records(ttft_ms=lambda i: 100.0 + 10.0 * i)  # sent every 100 ms, each 10 ms slower
    empty = gauge("vllm:num_requests_waiting", [0] * 25) + gauge("vllm:num_requests_running", list(range(0, 50, 2)))
    sat = next(f for f in diagnose(rising, empty) if f.rule == "saturation")
    assert sat.title == "Saturation: the backlog grows inside the engine"
    assert "requests in flight at send (client) rose" in sat.evidence[0]
    assert "running requests up to 48" in sat.evidence[2]
    assert "the backlog is admitted, not queued" in sat.evidence[3]
    assert "saturation" in rules_fired(rising)  # no server samples at all: the client's view suffices
    # TTFT rises ×11 but by 100 ms in all: the requests in flight barely grow — a trend, not a backlog
    assert "saturation" not in rules_fired(healthy_records(ttft_ms=lambda i: 10.0 + 0.5 * i), empty)
    # a backlog that filled during the first third and then held (a warm-up), TTFT flat afterwards
    warm = healthy_records(ttft_ms=lambda i: 100.0 + 20.0 * min(i, 60))
    assert "saturation" not in rules_fired(warm, empty)


def test_prefill_bound() -> None:
    rng = np.random.default_rng(1)
    inputs = rng.integers(1000, 8000, N)
    long = healthy_records(input_tokens=lambda i: int(inputs[i]), ttft_ms=lambda i: 30.0 + 0.1 * inputs[i])
    f = next(f for f in diagnose(long, healthy_samples()) if f.rule == "prefill_bound")
    assert "per 1k prompt tokens" in f.evidence[1]
    assert "100.0 ms per 1k" in f.evidence[1]
    flat = healthy_records(input_tokens=lambda i: int(inputs[i]))
    assert "prefill_bound" not in rules_fired(flat, healthy_samples())


def _prefix_samples(hits_end: float) -> list[ServerSample]:
    return gauge("vllm:prefix_cache_queries_total", np.linspace(0, 100_000, 25)) + gauge(
        "vllm:prefix_cache_hits_total", np.linspace(0, hits_end, 25)
    )


def test_prefix_cache_low() -> None:
    shared = healthy_records(shared_prefix=True)
    f = next(f for f in diagnose(shared, _prefix_samples(5_000)) if f.rule == "prefix_cache_low")
    assert "5.0%" in f.evidence[1]
    assert "prefix_cache_low" not in rules_fired(shared, _prefix_samples(80_000))
    assert "prefix_cache_low" not in rules_fired(healthy_records(), _prefix_samples(5_000))  # nothing shared


def test_kv_pressure() -> None:
    conc_tpot = healthy_records(tpot_ms=lambda i: 20.0 + (i % 20))
    samples = gauge("vllm:kv_cache_usage_perc", [0.97] * 25) + gauge("vllm:num_preemptions_total", range(25))
    f = next(f for f in diagnose(conc_tpot, samples) if f.rule == "kv_pressure")
    assert "24 preemptions" in " ".join(f.evidence)
    assert "kv_pressure" not in rules_fired(conc_tpot, healthy_samples())


def _interference_records(delayed: bool) -> list[RequestRecord]:
    windows = [(k * 2000.0 + 500.0, k * 2000.0 + 1000.0) for k in range(10)]
    recs = []
    for i in range(100):
        start = i * 200.0
        first = start + 80.0
        times = [first]
        while len(times) < 40:
            t = times[-1] + 20.0
            if delayed and any(s < t and times[-1] < e for s, e in windows):
                t += 80.0
            times.append(t)
        recs.append(record(i, sched_ms=start, ttft_ms=80.0, gaps_ms=np.diff(times).tolist(), input_tokens=256))
    for k, (s, e) in enumerate(windows):
        recs.append(record(1000 + k, sched_ms=s, ttft_ms=e - s, n_out=2, input_tokens=8000))
    return recs


def test_prefill_interference() -> None:
    f = next(f for f in diagnose(_interference_records(True)) if f.rule == "prefill_interference")
    assert "10 long prompts" in f.evidence[0]
    assert "prefill_interference" not in rules_fired(_interference_records(False))


def test_long_output_tail() -> None:
    rng = np.random.default_rng(3)
    lengths = np.where(rng.random(N) < 0.05, 400, 16)
    tail = healthy_records(n_out=lambda i: int(lengths[i]))
    f = next(f for f in diagnose(tail, healthy_samples()) if f.rule == "long_output_tail")
    assert "TPOT is steady" in f.evidence[1]
    assert "long_output_tail" not in rules_fired(healthy_records(), healthy_samples())


def test_stalls() -> None:
    def gaps(i: int) -> list[float]:
        g = [20.0] * 15
        if i % 20 == 0:
            g[7] = 2000.0
        return g

    f = next(f for f in diagnose(healthy_records(gaps_ms=gaps), healthy_samples()) if f.rule == "stalls")
    assert "10 of 200 streams" in f.evidence[0]
    assert "longest pause 2000 ms" in f.evidence[1]
    assert "stalls" not in rules_fired(healthy_records(gaps_ms=lambda i: [20.0] * 15))


def test_client_bottleneck() -> None:
    f = next(f for f in diagnose(healthy_records(lag_ms=50.0)) if f.rule == "client_bottleneck")
    assert f.impact == 1.0
    assert "p99 50.0 ms" in f.evidence[0]
    assert diagnose(healthy_records(lag_ms=50.0))[0].rule == "client_bottleneck"  # always first
    behind = rules_fired(healthy_records(), settings={"rate": 50.0})  # asked for 50 req/s, sent 10
    assert "client_bottleneck" in behind
    assert "client_bottleneck" not in rules_fired(healthy_records(), settings={"rate": 10.0})


def test_rate_limiting_and_error_bursts() -> None:
    limited = healthy_records(
        status=lambda i: Status.ERROR if i % 10 == 0 else Status.OK,
        error=lambda i: ErrorClass.HTTP_429 if i % 10 == 0 else None,
    )
    f = next(f for f in diagnose(limited) if f.rule == "errors")
    assert f.title == "Rate limiting (HTTP 429)"
    assert "http_429=20" in f.evidence[0]
    burst = healthy_records(
        status=lambda i: Status.ERROR if 100 <= i < 112 else Status.OK,
        error=lambda i: ErrorClass.HTTP_5XX if 100 <= i < 112 else None,
    )
    b = next(f for f in diagnose(burst) if f.rule == "errors")
    assert b.title == "Error burst"
    assert any(e.startswith("burst: 12 errors") for e in b.evidence)
    spread = healthy_records(
        status=lambda i: Status.ERROR if i % 16 == 0 else Status.OK,
        error=lambda i: ErrorClass.HTTP_5XX if i % 16 == 0 else None,
    )
    assert next(f for f in diagnose(spread) if f.rule == "errors").title == "Errors"
    assert "errors" not in rules_fired(healthy_records())


def test_cold_start() -> None:
    cold = healthy_records(ttft_ms=lambda i: 3000.0 if i < 5 else 85.0)
    f = next(f for f in diagnose(cold) if f.rule == "cold_start")
    assert "first 4 requests 3000 ms" in f.evidence[0]
    warmed = [record(r.id, sched_ms=r.scheduled_ns / 1e6, ttft_ms=3000.0, warmup=True) if r.id < 5 else r for r in cold]
    assert "cold_start" not in rules_fired(warmed)


_COMPOSITION = {"inference": {"share": 0.85, "ms_per_trace": 1200.0}, "gateway": {"share": 0.05, "ms_per_trace": 60}}
_WATERFALL = {"pattern": "search→search", "share_of_traces": 0.5, "p99_saving_ms": 10.0, "projected_p99_ms": 1490}
HEALTHY_TRACE = {
    "root_ops": {"POST /chat": {"p50": 800.0, "p99": 1500.0}},
    "layers": {"tail_bucket": {"composition": _COMPOSITION}},
    "operations": {"db.query": {"gap_on_path_ms_per_trace": 2.0}},
    "waterfalls": [_WATERFALL],
    "retries": [{"op": "search", "extra_attempts": 3, "traces": 3, "path_cost_ms_per_trace": 5.0}],
}


def test_layers_dominate() -> None:
    trace = dict(HEALTHY_TRACE)
    composition = {"inference": {"share": 0.3}, "retrieval": {"share": 0.55, "ms_per_trace": 900}}
    trace["layers"] = {"tail_bucket": {"composition": composition}}
    f = next(f for f in diagnose(healthy_records(), trace=trace) if f.rule == "layers_dominate")
    assert "retrieval: 55%" in f.evidence[0]
    pool = dict(HEALTHY_TRACE, operations={"db.pool": {"gap_on_path_ms_per_trace": 300.0}})
    assert "layers_dominate" in rules_fired(healthy_records(), trace=pool)
    assert "layers_dominate" not in rules_fired(healthy_records(), trace=HEALTHY_TRACE)
    assert "layers_dominate" not in rules_fired(healthy_records())  # no trace given


@pytest.mark.parametrize(
    ("rule", "key", "field", "value"),
    [("waterfalls", "waterfalls", "p99_saving_ms", 400.0), ("retries", "retries", "path_cost_ms_per_trace", 300.0)],
)
def test_waterfalls_and_retries(rule: str, key: str, field: str, value: float) -> None:
    row = dict(HEALTHY_TRACE[key][0])  # type: ignore[index]
    row[field] = value
    f = next(f for f in diagnose(healthy_records(), trace=dict(HEALTHY_TRACE, **{key: [row]})) if f.rule == rule)
    assert f"{value:.0f} ms" in f.evidence[0]
    assert rule not in rules_fired(healthy_records(), trace=HEALTHY_TRACE)


def test_findings_are_ordered_by_impact_and_render() -> None:
    recs = healthy_records(lag_ms=50.0, ttft_ms=lambda i: 3000.0 if i < 5 else 85.0)
    findings = diagnose(recs)
    assert [f.rule for f in findings] == ["client_bottleneck", "cold_start"]
    text = findings_text(Diagnosis("r1", tuple(findings)))
    assert text.index("Client bottleneck") < text.index("Cold start")
    assert "action:" in text
    assert set(RULES) >= {f.rule for f in findings}


def test_kv_usage_of_several_engines_is_the_fullest_not_the_sum() -> None:
    two_engines = [
        ServerSample(t_ns=k * 1_000_000_000, name="vllm:kv_cache_usage_perc", value=0.6, labels=f'engine="{e}"')
        for k in range(25)
        for e in (0, 1)
    ]
    assert "kv_pressure" not in rules_fired(healthy_records(), two_engines)


def test_findings_markdown() -> None:
    from tailscope.report.verify import findings_markdown

    md = findings_markdown(Diagnosis("r1", tuple(diagnose(healthy_records(lag_ms=50.0)))))
    assert md.startswith("#### Diagnosis of run `r1`: 1 finding")
    assert "**Client bottleneck: results not trustworthy** (impact 1.00)" in md
    assert "\n1. rerun with more client processes" in md
    assert findings_markdown(Diagnosis("r1", ())) == "#### Diagnosis of run `r1`: no findings\n"


def test_a_symptom_is_listed_right_after_the_finding_that_explains_it() -> None:
    from tailscope.verify.diagnose import explained_after_cause
    from tailscope.verify.findings import Finding

    def f(rule: str, impact: float, by: str | None = None) -> Finding:
        return Finding(rule, rule, "", (), "", (), impact, explained_by=by)

    ranked = [f("stalls", 0.9, "prefill_interference"), f("saturation", 0.7), f("prefill_interference", 0.5)]
    assert [x.rule for x in explained_after_cause(ranked)] == ["saturation", "prefill_interference", "stalls"]
    alone = [f("stalls", 0.9, "prefill_interference"), f("saturation", 0.7)]  # its cause not found: stays by impact
    assert [x.rule for x in explained_after_cause(alone)] == ["stalls", "saturation"]
