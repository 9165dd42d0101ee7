"""``tailscope sim`` and ``tailscope catalog`` through the real CLI: a run of kind sim lands in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.store.runs import RunStore

pytestmark = pytest.mark.integration


def cli(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAILSCOPE_DB": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_sim_writes_a_sim_run_and_json(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    out = tmp_path / "sim.json"
    p = cli(
        "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "10", "--requests", "300",
        "--input-tokens", "uniform:100:900", "--output-tokens", "64", "--seed", "3", "--slo", "ttft_p99=2s",
        "--json", str(out), "--quiet", db=db,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "TTFT" in p.stdout
    assert "real time" in p.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["run"]["kind"] == "sim"
    assert len(doc["requests"]) == 300
    assert doc["summary"]["requests"]["completed"] == 300
    assert doc["summary"]["sim"]["timeline"]
    store = RunStore(db)
    stored = store.get_run("latest")
    assert stored.run.kind == "sim"
    assert stored.run.status == "complete"
    assert stored.summary is not None
    assert stored.summary["requests"]["completed"] == 300
    samples = store.load_samples(stored.run.id)
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= {x.name for x in samples}
    recs = store.load_records(stored.run.id)
    assert len(recs) == 300
    assert all(r.tokens_source == "engine" for r in recs)
    # same seed, same simulation
    out2 = tmp_path / "sim2.json"
    p2 = cli(
        "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "10", "--requests", "300",
        "--input-tokens", "uniform:100:900", "--output-tokens", "64", "--seed", "3", "--json", str(out2),
        "--quiet", db=db,
    )  # fmt: skip
    assert p2.returncode == 0, p2.stderr
    a = json.loads(out2.read_text(encoding="utf-8"))["summary"]["ttft_ms"]
    assert a == doc["summary"]["ttft_ms"]


def test_sim_autoscale_and_errors(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "metric: queue_depth\ntarget: 4\nmax_replicas: 3\nscrape_interval_s: 5\nprovisioning_s: 20\n"
        "engine_init_s: 5\nload_gbps: 4\n",
        encoding="utf-8",
    )
    p = cli(
        "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "40", "--requests", "2500",
        "--input-tokens", "1500", "--output-tokens", "100", "--autoscale", str(policy), "--quiet", db=db,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "autoscaler: t=" in p.stdout
    bad = cli("sim", "--model", "llama-3.1-70b", "--gpu", "l4", "--requests", "10", db=db)
    assert bad.returncode == 1
    assert "--tp" in bad.stderr
    assert "Traceback" not in bad.stderr
    unknown = cli("sim", "--model", "gpt-9", "--requests", "10", db=db)
    assert unknown.returncode == 1
    assert "llama-3.1-8b" in unknown.stderr


def test_catalog_lists_models_and_gpus(tmp_path: Path) -> None:
    m = cli("catalog", "models", db=tmp_path / "x.duckdb")
    assert m.returncode == 0, m.stderr
    for mid in ("llama-3.1-8b", "qwen3-32b", "deepseek-v2-lite", "gpt-oss-20b", "opt-13b"):
        assert mid in m.stdout
    g = cli("catalog", "gpus", "--no-sources", db=tmp_path / "x.duckdb")
    assert g.returncode == 0
    assert "mi300x" in g.stdout
    assert "rtx-4090" in g.stdout
    h = cli("sim", "--help", db=tmp_path / "x.duckdb")
    assert h.returncode == 0
    assert "Example" in h.stdout


def test_support_chat_example_runs_as_shipped(tmp_path: Path) -> None:
    """Issue 24 defects: the shipped example simulates at 300 requests (it crashed with an IndexError) and benches the
    built-in engine without --model (it said ``model: tiny``) or a side service (its mixed traffic is off)."""
    db = tmp_path / "t.duckdb"
    example = str(Path(__file__).resolve().parents[2] / "examples" / "support-chat.yaml")
    p = cli("sim", "--profile", example, "--requests", "300", "--quiet", db=db)
    assert p.returncode == 0, p.stderr
    # --no-fail: the example's SLOs are judged against an H100 twin running on this machine's CPU; a busy machine can
    # miss them, which is the verdict's business, not this test's (it checks the example runs as shipped)
    b = cli("bench", "--profile", example, "--requests", "20", "--rate", "20", "--warmup", "0", "--quiet", "--no-fail",
            db=db, timeout=240)  # fmt: skip
    assert b.returncode == 0, b.stderr
