"""tailscope plan end to end: capacity re-checked by simulation, cost from a stored sim run, budgets from traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.io.contracts import parse_contract

pytestmark = pytest.mark.integration


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )


def test_capacity_answer_is_rechecked_by_simulation(tmp_path: Path) -> None:
    p = cli("plan", "capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--target-rps", "30",
            "--slo", "ttft_p99=1.5s", "--slo", "tpot_p99=50ms", "--tp", "1,2", "--gpu-price", "2.5",
            "--json", "-", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    best = doc["best"]
    assert best["check"]["passed"] is True
    assert best["gpus"] == best["replicas"] * best["tp"]
    assert best["usd_per_hour"] == pytest.approx(best["gpus"] * 2.5)
    assert doc["search_seconds"] < 10


def test_cost_from_a_stored_sim_run(tmp_path: Path) -> None:
    s = cli("sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--replicas", "2", "--rate", "10",
            "--requests", "300", "--db", "db.duckdb", "--quiet", cwd=tmp_path)  # fmt: skip
    assert s.returncode == 0, s.stderr
    p = cli("plan", "cost", "--gpu-price", "2.5", "--run", "latest", "--api-price-in", "0.15",
            "--api-price-out", "0.60", "--db", "db.duckdb", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["gpus"] == 2  # the sim run knows its deployment
    assert doc["usd_per_million_output_tokens"] == pytest.approx(2 * 2.5 / 3600 / doc["output_tokens_per_s"] * 1e6)
    assert doc["break_even_daily_requests"] > 0


def test_budget_from_traces_writes_a_contract_the_gate_reads(tmp_path: Path) -> None:
    assert cli("trace", "demo", "--out", "demo", cwd=tmp_path).returncode == 0
    ing = cli("trace", "ingest", "demo/before.otlp.json", "--set", "before", "--db", "db.duckdb", cwd=tmp_path)
    assert ing.returncode == 0, ing.stderr
    p = cli("plan", "budget", "--target", "2s", "--from-traces", "before", "--db", "db.duckdb",
            "--out", "contract.yaml", "--json", "-", cwd=tmp_path)  # fmt: skip
    doc = json.loads(p.stdout)
    assert p.returncode == (0 if doc["ok"] else 1), p.stderr  # exit 1 when a measured layer cannot hold
    layers = {lb["layer"]: lb for lb in doc["layers"]}
    assert "inference" in layers
    assert sum(lb["budget_ms"] for lb in doc["layers"]) == pytest.approx(doc["usable_ms"])
    assert all(lb["measured_p99_ms"] is not None for lb in doc["layers"])
    contract = parse_contract((tmp_path / "contract.yaml").read_text(), source="contract.yaml")
    assert contract.name == "latency-budget"
    # judged on the tail's critical path (issue 28 item 5): the demo's e2e p99 (≈ 2.24 s) is over a 2 s target, so
    # the budget cannot hold and says why; each layer's tail contribution adds up to the tail traces' e2e time
    assert p.returncode == 1
    assert doc["e2e_p99_ms"] > 2000
    assert "end-to-end p99" in doc["findings"][0]
    assert sum(lb["tail_ms"] for lb in doc["layers"]) == pytest.approx(doc["tail_e2e_ms"], rel=0.02)
    # … and far inside a 4 s target no layer is over budget (it once marked 4 of 6 layers over and exited 0)
    ok = cli("plan", "budget", "--target", "4s", "--from-traces", "before", "--db", "db.duckdb", "--json", "-",
             cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    fine = json.loads(ok.stdout)
    assert fine["ok"] is True
    assert fine["findings"] == []
    assert all(lb["holds"] for lb in fine["layers"])
    assert fine["e2e_p99_ms"] < 4000
    # explicit budgets judged the same way: business adds ≈ 250 ms at the tail, over a 200 ms budget → exit 1
    tight = cli("plan", "budget", "--target", "4s", "--from-traces", "before", "--db", "db.duckdb",
                "--layer", "inference=2.5s", "--layer", "retrieval=300ms", "--layer", "business=200ms",
                "--layer", "agent=50ms", "--layer", "gateway=20ms", "--layer", "network=20ms", "--json", "-",
                cwd=tmp_path)  # fmt: skip
    assert tight.returncode == 1
    over = [lb["layer"] for lb in json.loads(tight.stdout)["layers"] if lb["holds"] is False]
    assert over == ["business"]


def test_budget_per_layer_buffer_cli_and_exit_code(tmp_path: Path) -> None:
    # the method's example (../shared/method/003 §2.2): LLM P99 ≤ 100 ms after a 20 % buffer per segment
    base = ["plan", "budget", "--target", "300ms", "--layer", "gateway=50ms", "--layer", "inference=120ms",
            "--layer", "retrieval=80ms", "--layer", "network=50ms"]  # fmt: skip
    p = cli(*base, "--buffer-per-layer", "0.2", "--out", "c.yaml", "--json", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {lb["layer"]: lb["buffered_ms"] for lb in doc["layers"]}["inference"] == pytest.approx(100)
    contract = parse_contract((tmp_path / "c.yaml").read_text(), source="c.yaml")
    assert contract.name == "latency-budget"
    assert "max_ms: 100.0" in (tmp_path / "c.yaml").read_text()
    over = cli(*base, "--buffer", "0.2", cwd=tmp_path)  # 300 ms of layers in the 240 ms left after a global buffer
    assert over.returncode == 1
    assert "60 ms over" in over.stdout


def test_napkin_capacity_uses_the_slo_and_unit_cost_from_a_day(tmp_path: Path) -> None:
    # the method (001 §4.2): P95 ≤ 8 s over 350 tokens → ≥ 45 tok/s per stream (8 s less 0.2 s of TTFT)
    p = cli("plan", "capacity", "--users", "100", "--tokens-per-user-s", "25", "--gpu-tokens-s", "1400",
            "--slo", "e2e_p95=8s", "--slo", "ttft_p95=200ms", "--output-tokens", "350", "--json", "-",
            cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert round(doc["slo_tokens_per_user_s"]) == 45
    assert doc["tokens_per_user_s"] == doc["slo_tokens_per_user_s"]
    bad = cli("plan", "capacity", "--users", "100", "--tokens-per-user-s", "25", "--gpu-tokens-s", "1400",
              "--slo", "e2e_p95=8s", cwd=tmp_path)  # fmt: skip
    assert bad.returncode != 0
    assert "--output-tokens" in bad.stderr  # not ignored silently
    u = cli("plan", "cost", "--tokens-per-day", "2e9", "--gpu-hours", "192", "--gpu-price", "2.5", "--json", "-",
            cwd=tmp_path)  # fmt: skip
    assert u.returncode == 0, u.stderr
    assert json.loads(u.stdout)["usd_per_million_tokens"] == pytest.approx(0.24)


def test_compare_shows_cost_per_million_output_tokens(tmp_path: Path) -> None:
    for rate in ("5", "10"):
        s = cli("sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", rate, "--requests", "200",
                "--db", "db.duckdb", "--quiet", cwd=tmp_path)  # fmt: skip
        assert s.returncode == 0, s.stderr
    runs = json.loads(cli("runs", "list", "--db", "db.duckdb", "--json", "-", cwd=tmp_path).stdout)
    ids = [r["run"]["id"] for r in runs][:2]
    p = cli("compare", *ids, "--gpu-price", "2.5", "--db", "db.duckdb", "--json", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    costs = doc["usd_per_million_output_tokens"]
    tok = next(r for r in doc["rows"] if r["metric"] == "output_tokens_per_s")["values"]
    assert costs == pytest.approx([2.5 / 3600 / t * 1e6 for t in tok])  # one GPU each (the sim's deployment)
    text = cli("compare", *ids, "--gpu-price", "2.5", "--db", "db.duckdb", cwd=tmp_path).stdout
    assert "$ per 1M output tokens:" in text
