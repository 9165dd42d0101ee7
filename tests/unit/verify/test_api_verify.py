"""The verify family's public API: runs from anywhere (results, RunData, exports, a store), contracts as files, dicts or
objects, the gate's verdicts and diagnosis, compare, diagnose and alerts — and only TailscopeErrors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from gate_factory import lognormal_run

import tailscope
from tailscope.metrics.document import build_export
from tailscope.metrics.summary import summarize
from tailscope.records import Run, RunKind, RunStatus, ServerSample, Target
from tailscope.runner.bench_result import BenchResult
from tailscope.store.runs import RunStore
from tailscope.verify.rundata import RunData

SLO = {"slo": [{"metric": "ttft_ms", "percentile": "p99", "max": 100_000}, {"metric": "error_rate", "max": 0.5}]}


def bench_result(data: RunData) -> BenchResult:
    run = Run(
        id=data.id,
        kind=RunKind.BENCH,
        tool_version="test",
        started_at="2026-01-01T00:00:00Z",
        target=Target(url="http://127.0.0.1:1", model="m"),
        seed=0,
        settings={"concurrency": 4},
    )
    records = list(data.records)
    return BenchResult(run, RunStatus.COMPLETE, summarize(records), {}, records, None, None)


def stored(tmp_path: Path, *runs: RunData, tag: str | None = None) -> Path:
    db = tmp_path / "ts.duckdb"
    rs = RunStore(db)
    for i, data in enumerate(runs):
        run = replace(bench_result(data).run, started_at=f"2026-01-0{i + 1}T00:00:00Z")
        rs.create_run(run)
        rs.write_records(run.id, list(data.records))
        rs.finish_run(run.id, RunStatus.COMPLETE, summarize(list(data.records)).to_dict())
    if tag is not None:
        rs.tag(runs[0].id, tag)
    return db


def test_a_bench_result_is_a_run() -> None:
    result = bench_result(lognormal_run("bench-1", 300, seed=1))
    data = tailscope.load_run(result)
    assert data.id == "bench-1"
    assert len(data.records) == 300
    assert data.run["settings"] == {"concurrency": 4}
    assert data.summary is not None
    assert data.summary["requests"]["completed"] == 300
    gate = tailscope.gate(SLO, run=result)
    assert gate.passed
    assert gate.exit_code == 0
    assert gate.contract == "contract"  # a dict needs no name
    assert [c.line for c in gate.checks] == [0, 0]  # not from a file
    assert gate.diagnosis is None
    assert "findings" not in gate.to_dict()


def test_contracts_as_files_dicts_and_objects(tmp_path: Path) -> None:
    run = lognormal_run("r", 200, seed=2)
    path = tmp_path / "c.yaml"
    path.write_text("name: svc\nslo:\n  - {metric: ttft_ms, percentile: p50, max: 1}\n")
    from_file = tailscope.gate(path, run=run)
    assert from_file.checks[0].line == 3
    assert from_file.exit_code == 1
    from_str = tailscope.gate(str(path), run=run)
    parsed = tailscope.gate(from_file_contract(path), run=run)
    assert from_str.to_dict() == from_file.to_dict() == parsed.to_dict()
    with pytest.raises(tailscope.ContractError, match=r"<contract dict>: slo\[0\]: ttft_ms needs a percentile"):
        tailscope.gate({"slo": [{"metric": "ttft_ms", "max": 1}]}, run=run)
    with pytest.raises(tailscope.ConfigError, match="expected a contract file"):
        tailscope.gate(42, run=run)  # type: ignore[arg-type]
    (tmp_path / "bad.yaml").write_bytes(b"name: x\nslo: \xff\n")
    with pytest.raises(tailscope.ContractError, match=r"bad.yaml:2: the contract is not UTF-8"):
        tailscope.gate(tmp_path / "bad.yaml", run=run)


def from_file_contract(path: Path) -> tailscope.Contract:
    from tailscope.io.contracts import load_contract

    return load_contract(path)


def test_runs_from_exports_and_stores(tmp_path: Path) -> None:
    base, cand = lognormal_run("base0001", 400, seed=3), lognormal_run("cand0002", 400, seed=4)
    db = stored(tmp_path, base, cand, tag="main")
    by_ref = tailscope.load_run("latest", store=db)
    assert by_ref.id == "cand0002"
    assert len(by_ref.records) == 400
    assert tailscope.load_run("latest:main", store=RunStore(db)).tags == ("main",)
    export = tmp_path / "cand.json"
    export.write_text(json.dumps(build_export(bench_result(cand).run, {}, list(cand.records))))
    from_file = tailscope.load_run(export)
    assert from_file.id == "cand0002"
    assert [r.id for r in from_file.records] == [r.id for r in by_ref.records]
    contract = {"regression": {"baseline": "latest:main", "max_increase": {"ttft_ms.p50": "50%"}}}
    gate = tailscope.gate(contract, run=export, store=db)
    assert gate.baseline_id == "base0001"
    assert gate.checks[0].ci is not None
    broken = tmp_path / "broken.json"
    broken.write_text('{"run":\n  {,}}')
    with pytest.raises(tailscope.ContractError, match=r"broken.json:2: invalid JSON"):
        tailscope.load_run(broken)


def test_no_store_is_created_by_reading(tmp_path: Path) -> None:
    db = tmp_path / "none" / "ts.duckdb"
    with pytest.raises(tailscope.NotFoundError, match="no store at"):
        tailscope.load_run("latest", store=db)
    assert not (tmp_path / "none").exists()


def test_a_missing_baseline_is_missing_data_not_an_error() -> None:
    run = lognormal_run("r", 200, seed=5)
    contract = {"regression": {"max_increase": {"ttft_ms.p99": "10%"}}}
    gate = tailscope.gate(contract, run=run)
    assert gate.exit_code == 2
    assert gate.checks[0].verdict is tailscope.Verdict.MISSING
    regressed = tailscope.gate(contract, run=lognormal_run("slow", 800, seed=6, ttft_median_ms=400), baseline=run)
    assert regressed.checks[0].verdict is tailscope.Verdict.FAIL


def test_diagnosis_joins_a_gate_that_does_not_pass() -> None:
    run = lognormal_run("r", 300, seed=7, error_every=3)
    failed = tailscope.gate({"slo": [{"metric": "error_rate", "max": 0.01}]}, run=run, diagnose=True)
    assert not failed.passed
    assert failed.diagnosis is not None
    assert "errors" in {f.rule for f in failed.findings}
    assert failed.to_dict()["findings"] == [f.to_dict() for f in failed.findings]
    passed = tailscope.gate(SLO, run=run, diagnose=True)
    assert passed.passed
    assert passed.diagnosis is None
    diagnosis = tailscope.diagnose(run)
    assert diagnosis.to_dict() == {
        "run": "r",
        "findings": [f.to_dict() for f in diagnosis.findings],
        "trees": [t.to_dict() for t in diagnosis.trees],
    }
    assert {t.symptom for t in diagnosis.trees} >= {"ttft_high", "tpot_high", "tail", "cost_spike"}
    assert [f.rule for f in diagnosis.findings] == [f.rule for f in failed.findings]


def test_layer_checks_from_samples_and_trace_rules_from_an_analysis() -> None:
    run = lognormal_run("r", 50, seed=8)
    contract = {"layers": [{"layer": "retrieval", "percentile": "p99", "max_ms": 100}]}
    gate = tailscope.gate(contract, run=run, traces={"retrieval": [10.0] * 90 + [500.0] * 10})
    assert gate.checks[0].verdict is tailscope.Verdict.FAIL
    assert tailscope.gate(contract, run=run).checks[0].verdict is tailscope.Verdict.MISSING
    analysis = {"layers": {}, "waterfalls": [], "retries": {}}
    assert tailscope.diagnose(run, traces=analysis).run_id == "r"


def test_compare_marks_a_real_difference_and_refuses_bad_options() -> None:
    a, b = lognormal_run("a", 1200, seed=9), lognormal_run("b", 1200, seed=10, ttft_median_ms=400)
    cmp = tailscope.compare([a, b], metrics=["ttft"], percentiles="p50,p99")
    assert [r.label for r in cmp.rows] == ["ttft_ms.p50", "ttft_ms.p99"]
    assert cmp.row("ttft_ms.p50").direction(0) == "worse"
    assert cmp.to_dict()["reference"] == "a"
    with pytest.raises(KeyError):
        cmp.row("e2e_ms.p50")
    for kwargs, needle in (
        ({"runs": [a]}, "at least two runs"),
        ({"runs": [a, b], "confidence": 1.5}, "--confidence"),
        ({"runs": [a, b], "resamples": 10}, "--resamples"),
        ({"runs": [a, b], "metrics": "speed"}, "unknown metric 'speed'"),
    ):
        with pytest.raises(tailscope.ConfigError, match=needle):
            tailscope.compare(**kwargs)  # type: ignore[arg-type]


def test_alerts_check_options_before_reading_the_contract(tmp_path: Path) -> None:
    with pytest.raises(tailscope.ConfigError, match="--for '5 minutes'"):
        tailscope.alerts(tmp_path / "missing.yaml", for_="5 minutes")
    rules = tailscope.alerts({"name": "chat", "slo": [{"metric": "ttft_ms", "percentile": "p99", "max": 1500}]})
    assert "ChatTTFTP99SloBreach" in rules.alert_names
    assert rules.to_dict() == rules.document
    assert rules.grafana is not None
    assert rules.grafana["title"]


def test_tailscope_gate_stays_the_function_whatever_was_imported_first() -> None:
    """A subpackage named ``gate`` would replace the function on ``tailscope`` once imported: the core is verify/."""
    import subprocess
    import sys

    code = "import tailscope.verify.evaluate, tailscope.report.verify, tailscope; print(callable(tailscope.gate))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "True"


def test_memory_limits_from_scraped_gpu_telemetry() -> None:
    """The method's contract line "显存占用≤8GB" (003 §2): a memory limit gated on the run's DCGM samples."""
    base = lognormal_run("mem", 200, seed=8)
    dcgm = [
        ServerSample(t_ns=k * 1_000_000_000, name=name, value=v, labels='gpu="0"')
        for k in range(5)
        for name, v in (("DCGM_FI_DEV_FB_USED", 7000.0 + 400 * k), ("DCGM_FI_DEV_FB_FREE", 73000.0 - 400 * k))
    ] + [ServerSample(t_ns=k * 1_000_000_000, name="vllm:kv_cache_usage_perc", value=0.2 * k) for k in range(5)]
    run = replace(base, samples=tuple(dcgm))
    contract = {
        "slo": [
            {"metric": "gpu_memory_used_max", "max": "8GiB"},
            {"metric": "gpu_memory_used_frac_max", "max": 0.1},
            {"metric": "kv_usage_max", "max": 0.9},
        ]
    }
    result = tailscope.gate(contract, run=run)
    checks = {c.name: c for c in result.checks}
    mem = checks["slo gpu_memory_used_max"]
    assert mem.observed == 8600.0  # the fullest scrape, MiB
    assert mem.verdict is tailscope.Verdict.FAIL  # 8,600 MiB > 8 GiB (8,192 MiB)
    assert tailscope.gate({"slo": [{"metric": "gpu_memory_used_max", "max": "9GiB"}]}, run=run).passed
    assert checks["slo gpu_memory_used_frac_max"].verdict is tailscope.Verdict.FAIL  # 8,600 / 80,000 > 0.1
    assert checks["slo kv_usage_max"].observed == pytest.approx(0.8)
    assert "GiB" in mem.detail
    no_gpu = tailscope.gate({"slo": [{"metric": "gpu_memory_used_max", "max": "8GB"}]}, run=base)
    assert no_gpu.checks[0].verdict is tailscope.Verdict.MISSING
    assert "--telemetry-url" in no_gpu.checks[0].detail
    with pytest.raises(tailscope.ContractError, match="remove 'percentile'"):
        tailscope.gate({"slo": [{"metric": "gpu_util_mean", "percentile": "p99", "max": 90}]}, run=base)
    with pytest.raises(tailscope.ContractError, match="8 gigs"):
        tailscope.gate({"slo": [{"metric": "gpu_memory_used_max", "max": "8 gigs"}]}, run=base)


def test_trace_only_gate_needs_no_run() -> None:
    layers = {"retrieval": [50.0 + i for i in range(100)], "gateway": [10.0] * 100}
    contract = {
        "slo": [{"metric": "ttft_ms", "percentile": "p99", "max": 500}],
        "layers": [
            {"layer": "retrieval", "percentile": "p99", "max_ms": 150},
            {"layer": "gateway", "percentile": "p99.9", "max_ms": 5},
        ],
    }
    result = tailscope.gate(contract, run=None, traces=layers)
    assert [c.name for c in result.checks] == ["layer retrieval.p99", "layer gateway.p99.9"]
    assert [c.verdict for c in result.checks] == [tailscope.Verdict.PASS, tailscope.Verdict.FAIL]
    assert result.exit_code == 1
    assert "slo ttft_ms.p99" not in [c.name for c in result.checks]
    assert any("ttft_ms.p99" in n for n in result.notes)
    with pytest.raises(tailscope.ConfigError, match="needs a trace set"):
        tailscope.gate(contract, run=None)
    with pytest.raises(tailscope.ConfigError, match="no layers"):
        tailscope.gate({"slo": contract["slo"]}, run=None, traces=layers)


def test_diagnose_with_a_baseline_walks_the_comparison_trees() -> None:
    small = replace(
        lognormal_run("small", 300, seed=9, ttft_median_ms=400, n_out=24), run={"target": {"model": "m-7b"}}
    )
    big = replace(lognormal_run("big", 300, seed=10, ttft_median_ms=200, n_out=8), run={"target": {"model": "m-70b"}})
    d = tailscope.diagnose(small, baseline=big)
    slower = d.tree("smaller_model_slower")
    assert slower.present
    assert "m-7b (7B)" in slower.evidence
    assert next(b for b in slower.branches if "more tokens" in b.check).verdict == "yes"
    assert d.tree("cost_spike").present is not None  # compared: tokens per request against the baseline
    assert tailscope.diagnose(small).tree("smaller_model_slower").present is None
