"""gate, compare and diagnose through the real CLI: a DuckDB store with tagged runs, export files, a real bench."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tailscope.metrics.document import build_export
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, Status, Target
from tailscope.store.runs import RunStore

pytestmark = pytest.mark.integration
MS = 1_000_000

CONTRACT = """\
name: chat-service
slo:
  - {metric: ttft_ms, percentile: p99, max: 5000}
  - {metric: error_rate, max: 0.05}
regression:
  baseline: latest:main
  max_increase: {ttft_ms.p50: 10%, ttft_ms.p99: 10%, output_tokens_per_s: -5%}
  confidence: 0.95
"""


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TAILSCOPE_DEBUG": ""},
        check=False,
    )


def make_records(n: int, *, seed: int, ttft_median_ms: float, lag_ms: float = 0.2) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    ttft = ttft_median_ms * np.exp(0.4 * rng.standard_normal(n))
    out = []
    for i in range(n):
        sched = i * 50 * MS
        first = sched + int(ttft[i] * MS)
        times = tuple(first + k * 20 * MS for k in range(8))
        out.append(
            RequestRecord(
                id=i,
                scheduled_ns=sched,
                sent_ns=sched + int(lag_ms * MS),
                first_token_ns=first,
                end_ns=times[-1],
                status=Status.OK,
                input_tokens=128,
                output_tokens=8,
                chunk_times_ns=times,
                chunk_tokens=(1,) * 8,
            )
        )
    return out


def store_run(store: RunStore, run_id: str, records: list[RequestRecord], started: str) -> Run:
    run = Run(
        id=run_id,
        kind=RunKind.BENCH,
        tool_version="test",
        started_at=started,
        target=Target(url="http://127.0.0.1:1", model="m"),
        seed=0,
    )
    store.create_run(run)
    store.write_records(run_id, records)
    store.finish_run(run_id, RunStatus.COMPLETE, summarize(records).to_dict())
    return run


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "ts.duckdb"
    rs = RunStore(db)
    store_run(rs, "base0001", make_records(1500, seed=1, ttft_median_ms=200), "2026-01-01T00:00:00Z")
    rs.tag("base0001", "main")
    store_run(rs, "same0002", make_records(1500, seed=2, ttft_median_ms=200), "2026-01-02T00:00:00Z")
    store_run(rs, "slow0003", make_records(1500, seed=3, ttft_median_ms=300, lag_ms=40), "2026-01-03T00:00:00Z")
    contract = tmp_path / "contract.yaml"
    contract.write_text(CONTRACT)
    return db, contract


def test_gate_fails_on_a_real_regression_with_reports(store: tuple[Path, Path], tmp_path: Path) -> None:
    db, contract = store
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    p = cli(
        "gate",
        str(contract),
        "--run",
        "slow",
        "--db",
        str(db),
        "--junit",
        str(junit),
        "--markdown",
        str(md),
        "--github",
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "regression ttft_ms.p50" in p.stdout
    assert "vs baseline base0001: FAIL" in p.stdout
    assert f"::error file={contract},line=7,title=regression ttft_ms.p50 fail::" in p.stdout
    root = ET.fromstring(junit.read_text())  # noqa: S314 (our own output)
    assert len(root.findall("testcase")) == 5
    failed = {c.get("name") for c in root.findall("testcase") if c.find("failure") is not None}
    assert failed == {"regression ttft_ms.p50", "regression ttft_ms.p99"}
    assert md.read_text().startswith("### ❌")
    # --diagnose adds the findings of the failing run to the outputs
    p = cli("gate", str(contract), "--run", "slow", "--db", str(db), "--markdown", str(md), "--diagnose")
    assert p.returncode == 1
    assert "Client bottleneck: results not trustworthy  [client_bottleneck" in p.stdout
    assert "#### Diagnosis of run `slow0003`" in md.read_text()


def test_gate_passes_on_noise_and_on_export_files(store: tuple[Path, Path], tmp_path: Path) -> None:
    db, contract = store
    p = cli("gate", str(contract), "--run", "same", "--db", str(db), "--json", "-")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)  # with --json - stdout holds only the JSON
    assert doc["verdict"] == "pass"
    assert "gate 'chat-service'" in p.stderr
    assert {c["verdict"] for c in doc["checks"]} <= {"pass", "inconclusive"}
    # the same run as a bench --json export, and the baseline as an export too
    rs = RunStore(db)
    for ref, name in (("same0002", "cand.json"), ("base0001", "base.json")):
        stored = rs.get_run(ref)
        (tmp_path / name).write_text(json.dumps(build_export(stored.run, stored.summary or {}, rs.load_records(ref))))
    p = cli("gate", str(contract), "--run", str(tmp_path / "cand.json"), "--baseline", str(tmp_path / "base.json"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "on run same0002 vs baseline base0001: PASS" in p.stdout


def test_gate_exit_2_on_bad_contract_or_missing_data(store: tuple[Path, Path], tmp_path: Path) -> None:
    db, contract = store
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONTRACT.replace("max: 0.05}", "max: 0.05, maximum: 1}"))
    p = cli("gate", str(bad), "--run", "same", "--db", str(db))
    assert p.returncode == 2
    assert p.stderr.strip() == (
        f"tailscope: error: {bad}:4: slo[1].maximum: unknown key "
        "(allowed: metric, percentile, max, min, class, for, severity)"
    )
    p = cli("gate", str(contract), "--run", "nope", "--db", str(db))
    assert p.returncode == 2
    assert "no run 'nope'" in p.stderr
    p = cli("gate", str(contract), "--run", "same", "--baseline", "latest:release", "--db", str(db))
    assert p.returncode == 2
    assert "MISSING: regression ttft_ms.p50: baseline 'latest:release': no run tagged 'release'" in p.stdout
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    p = cli("gate", str(contract), "--run", str(broken))
    assert p.returncode == 2
    assert "invalid JSON" in p.stderr


def test_compare_and_diagnose(store: tuple[Path, Path]) -> None:
    db, _ = store
    p = cli("compare", "base", "same", "slow", "--metrics", "ttft_ms,requests_per_s", "--db", str(db))
    assert p.returncode == 0, p.stderr
    assert "* worse" in p.stdout
    md = store[1].parent / "compare.md"
    p = cli(
        "compare", "base", "slow", "--metrics", "ttft", "--percentiles", "p50", "--markdown", str(md), "--db", str(db)
    )
    assert p.returncode == 0, p.stderr
    assert "| `ttft_ms.p50` | 198.0 | 305.2 | **+54.1% [" in md.read_text()
    assert "* worse**" in md.read_text()
    p = cli("compare", "base", "slow", "--metrics", "ttft", "--percentiles", "p50", "--json", "-", "--db", str(db))
    doc = json.loads(p.stdout)
    row = doc["rows"][0]
    assert row["metric"] == "ttft_ms"
    assert row["diffs"][0]["direction"] == "worse"
    assert row["diffs"][0]["rel"] == pytest.approx(0.5, abs=0.1)
    p = cli("diagnose", "slow", "--json", "-", "--db", str(db))
    assert p.returncode == 0, p.stderr
    findings = json.loads(p.stdout)["findings"]
    assert findings[0]["rule"] == "client_bottleneck"
    p = cli("diagnose", "same", "--db", str(db))
    assert "no findings" in p.stdout


def test_bench_then_gate_end_to_end(tmp_path: Path) -> None:
    """Real bench runs against the scripted server: tag a baseline, then a slower server fails the gate."""
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    db = str(tmp_path / "ts.duckdb")
    contract = tmp_path / "contract.yaml"
    contract.write_text(CONTRACT)
    common = ("--requests", "120", "--concurrency", "8", "--output-tokens", "8", "--db", db, "--quiet")
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=2, log=False)) as srv:
        p = cli("bench", "--url", srv.url, *common)
        assert p.returncode == 0, p.stderr
    assert cli("runs", "tag", "latest", "main", "--db", db).returncode == 0
    with ScriptedServer(ScriptedConfig(ttft_ms=60, itl_ms=2, log=False)) as srv:
        p = cli("bench", "--url", srv.url, *common, "--json", str(tmp_path / "slow.json"))
        assert p.returncode == 0, p.stderr
    p = cli("gate", str(contract), "--run", "latest", "--db", db)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL" in p.stdout
    p = cli("gate", str(contract), "--run", str(tmp_path / "slow.json"), "--db", db)
    assert p.returncode == 1, p.stdout + p.stderr


def test_layer_contracts_and_trace_rules_on_a_stored_trace_set(tmp_path: Path) -> None:
    db = str(tmp_path / "ts.duckdb")
    assert cli("trace", "demo", "--out", str(tmp_path / "d"), "--traces", "300").returncode == 0
    p = cli("trace", "ingest", str(tmp_path / "d" / "before.otlp.json"), "--set", "before", "--db", db)
    assert p.returncode == 0, p.stderr
    export = tmp_path / "empty.json"
    export.write_text(json.dumps({"run": {"id": "x"}, "requests": []}))
    contract = tmp_path / "layers.yaml"
    contract.write_text(
        "name: agent\nlayers:\n  - {layer: retrieval, percentile: p99, max_ms: 200}\n"
        "  - {layer: gateway, percentile: p99, max_ms: 50}\n"
    )
    p = cli("gate", str(contract), "--run", str(export), "--traces", "before", "--db", db, "--json", "-")
    assert p.returncode == 1, p.stdout + p.stderr
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert checks["layer retrieval.p99"]["verdict"] == "fail"
    assert checks["layer gateway.p99"]["verdict"] == "pass"
    assert checks["layer retrieval.p99"]["samples"] > 100
    p = cli("gate", str(contract), "--run", str(export), "--traces", "missing", "--db", db)
    assert p.returncode == 2
    assert "no trace set 'missing'" in p.stderr
    p = cli("diagnose", str(export), "--traces", "before", "--db", db, "--json", "-")
    assert p.returncode == 0, p.stderr
    rules = {f["rule"] for f in json.loads(p.stdout)["findings"]}
    assert "waterfalls" in rules
    # a contract written by `plan budget` is read by the gate as is
    budget = tmp_path / "budget.yaml"
    p = cli(
        "plan",
        "budget",
        "--target",
        "3s",
        "--layer",
        "gateway=50ms",
        "--layer",
        "retrieval=100ms",
        "--out",
        str(budget),
    )
    assert p.returncode == 0, p.stderr
    p = cli("gate", str(budget), "--run", str(export), "--traces", "before", "--db", db, "--json", "-")
    names = [c["name"] for c in json.loads(p.stdout)["checks"]]
    assert names == ["slo e2e_ms.p99", "layer gateway.p99", "layer retrieval.p99"]


def test_compare_and_diagnose_simulated_runs(tmp_path: Path) -> None:
    """Simulations land in the same store: compare works across kinds, diagnose sees the simulated queue."""
    db = str(tmp_path / "ts.duckdb")
    # at 150 req/s all 400 fit the KV cache and run at once (prefilled in chunks, nothing in the waiting queue):
    # diagnose names the saturation from the requests in flight and TTFT growing to the end of the run
    common = ("--requests", "400", "--input-tokens", "uniform:200:1800", "--db", db)
    ids = []
    for rate in ("5", "150"):  # light, and far past what one H100 serves (≈ 20–40 req/s of these)
        p = cli("sim", "--rate", rate, *common)
        assert p.returncode == 0, p.stderr
        ids.append(re.search(r"run (\S+) stored", p.stdout + p.stderr).group(1))  # type: ignore[union-attr]
    rs = RunStore(Path(db))
    store_run(rs, "bench0001", make_records(400, seed=1, ttft_median_ms=200), "2000-01-01T00:00:00Z")
    p = cli("compare", ids[0], ids[1], "bench0001", "--metrics", "ttft_ms,requests_per_s", "--json", "-", "--db", db)
    assert p.returncode == 0, p.stderr
    rows = {(r["metric"], r["stat"]): r for r in json.loads(p.stdout)["rows"]}
    assert rows[("ttft_ms", "p99")]["diffs"][0]["direction"] == "worse"  # 150 req/s queues
    assert rows[("requests_per_s", None)]["diffs"][0]["direction"] == "better"
    light = {f["rule"] for f in json.loads(cli("diagnose", ids[0], "--json", "-", "--db", db).stdout)["findings"]}
    heavy = {f["rule"]: f for f in json.loads(cli("diagnose", ids[1], "--json", "-", "--db", db).stdout)["findings"]}
    assert heavy["saturation"]["title"] == "Saturation: the backlog grows inside the engine"
    assert "saturation" not in light


def test_diagnose_finds_injected_stalls_of_a_real_server(tmp_path: Path) -> None:
    """`tailscope serve --stall-prob` pauses some streams mid-answer; diagnose reports them with the injected length.

    On a clean server the rule stays silent unless the host itself pauses the processes (a loaded CI machine can
    stall streams for a few hundred ms — which diagnose rightly reports); the injected pause is longer than that.
    """
    from test_alerts_serve import _start_serve, _stop

    found = {}
    for name, extra in (("stalling", ("--stall-prob", "0.25", "--stall-ms", "1500")), ("clean", ())):
        proc, url = _start_serve(tmp_path / f"serve-{name}.log", "--seed", "3", *extra)
        try:
            db = str(tmp_path / f"{name}.duckdb")
            p = cli(
                "bench",
                "--url",
                url,
                "--requests",
                "80",
                "--concurrency",
                "8",
                "--output-tokens",
                "32",
                "--db",
                db,
                "--quiet",
            )
            assert p.returncode == 0, p.stderr
        finally:
            _stop(proc)
        p = cli("diagnose", "latest", "--json", "-", "--db", db)
        assert p.returncode == 0, p.stderr
        found[name] = {f["rule"]: f for f in json.loads(p.stdout)["findings"]}
    stall = found["stalling"]["stalls"]
    stalled, total = (int(x) for x in re.match(r"(\d+) of (\d+) streams", stall["evidence"][0]).groups())  # type: ignore[union-attr]
    assert stalled >= 0.1 * total
    longest = float(re.search(r"longest pause (\d+) ms", stall["evidence"][1]).group(1))  # type: ignore[union-attr]
    assert longest >= 1490
    clean = found["clean"].get("stalls")
    if clean is not None:  # only host-level pauses, far shorter than the injected ones
        assert float(re.search(r"longest pause (\d+) ms", clean["evidence"][1]).group(1)) < 1490  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--selector", "job=vllm"], "--selector 'job=vllm': expected label matchers"),
        (["--for", "5 minutes"], "--for '5 minutes': expected a Prometheus duration"),
        (["--kv-limit", "90"], "--kv-limit must be in (0, 1]"),
    ],
)
def test_alerts_bad_flags_give_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    contract = tmp_path / "c.yaml"
    contract.write_text(CONTRACT)
    p = cli("alerts", str(contract), "--out", str(tmp_path / "rules.yaml"), *args)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"tailscope: error: {needle}")
    assert not (tmp_path / "rules.yaml").exists()


def test_trace_only_gate_from_the_cli(tmp_path: Path) -> None:
    """`tailscope gate --contract C --traces SET`: a dependency contract gated on traces alone, no bench run."""
    spans = tmp_path / "layers.json"
    spans.write_text(json.dumps({"layers": {"retrieval": [60.0 + i for i in range(200)], "gateway": [8.0] * 200}}))
    contract = tmp_path / "deps.yaml"
    contract.write_text(
        "name: deps\nlayers:\n  - {layer: retrieval, percentile: p99.9, max_ms: 200}\n"
        "  - {layer: gateway, percentile: p99, max_ms: 50}\n"
    )
    db = str(tmp_path / "empty.duckdb")  # no store at all: nothing but the traces is read
    p = cli("gate", "--contract", str(contract), "--traces", str(spans), "--db", db, "--json", "-")
    assert p.returncode == 1, p.stdout + p.stderr  # retrieval p99.9 ≈ 259 ms > 200 ms
    doc = json.loads(p.stdout)
    assert [c["verdict"] for c in doc["checks"]] == ["fail", "pass"]
    assert doc["run"].startswith("trace set")
    loose = tmp_path / "loose.yaml"
    loose.write_text("name: deps\nlayers:\n  - {layer: retrieval, percentile: p99, max_ms: 300}\n")
    assert cli("gate", "--contract", str(loose), "--traces", str(spans), "--db", db).returncode == 0
    p = cli("gate", str(loose), "--trace-only", "--db", db)
    assert p.returncode == 2
    assert "needs --traces" in p.stderr
