"""``tailscope bench`` is a CI citizen: it exits non-zero when an SLO fails or too many requests fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.testing.fault_server import FaultConfig, FaultServer

pytestmark = pytest.mark.integration


def bench(url: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tailscope", "bench", "--url", url, "--requests", "9", "--concurrency", "3"]
    argv += ["--output-tokens", "4", "--metrics-url", "off", "--db", str(db), "-q", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_failures_and_missed_slos_fail_the_run(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    with FaultServer(FaultConfig(faults=["ok", "ok", "http500"], tokens=4)) as srv:
        failing = bench(srv.url, db)  # a third of the requests fail: far over the default 1 %
        tolerated = bench(srv.url, db, "--max-error-rate", "0.5")
        opted_out = bench(srv.url, db, "--no-fail")
        slo = bench(srv.url, db, "--max-error-rate", "0.5", "--slo", "e2e_p90=1s")
    assert failing.returncode == 3, failing.stderr
    assert "3 of 9 requests failed" in failing.stderr
    assert "http_5xx=3" in failing.stderr
    assert tolerated.returncode == 0, tolerated.stderr
    assert opted_out.returncode == 0, opted_out.stderr
    # p90 of 9 requests with 3 failures lands on a failure: slower than any limit
    assert slo.returncode == 3, slo.stderr
    assert "SLO e2e_p90" in slo.stderr


def test_a_clean_run_exits_zero(tmp_path: Path) -> None:
    with FaultServer(FaultConfig(faults=["ok"], tokens=4)) as srv:
        p = bench(srv.url, tmp_path / "db.duckdb", "--slo", "ttft_p99=5s")
    assert p.returncode == 0, p.stderr


def _search(url: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tailscope", "bench", "--url", url, "--output-tokens", "4", "--metrics-url", "off"]
    argv += ["--db", str(db), "--timeout-first-token", "0.5", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_a_target_that_stops_answering_ends_the_search_and_the_sweep(tmp_path: Path) -> None:
    """Requests that never get a first token (the server stuck): one probe or point, then exit 1 (as for an
    unreachable target) with the reason — not seven probes of the timeout each; the runs measured are kept."""
    db = tmp_path / "db.duckdb"
    out = tmp_path / "fm.json"
    with FaultServer(FaultConfig(faults=["hang"])) as srv:
        search = _search(srv.url, db, "--find-max", "--rate", "2", "--duration", "1", "--slo", "ttft_p99=1s",
                         "--json", str(out))  # fmt: skip
        sweep = _search(srv.url, db, "--sweep", "concurrency=1,2,4", "--requests", "2")
    assert search.returncode == 1, search.stderr
    assert "the target answered none of the" in search.stderr
    assert "timeout_first_token=" in search.stderr
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == 1
    assert doc["find_max"]["rate"] is None
    assert doc["find_max"]["stopped"].startswith("the target answered none")
    assert sweep.returncode == 1, sweep.stderr
    assert "sweep stopped" in sweep.stdout
    assert "1 run(s) kept" in sweep.stderr


def test_http_errors_are_answers_the_sweep_goes_on(tmp_path: Path) -> None:
    with FaultServer(FaultConfig(faults=["http500"])) as srv:
        sweep = _search(srv.url, tmp_path / "db.duckdb", "--sweep", "concurrency=1,2", "--requests", "2")
    assert sweep.returncode == 0, sweep.stderr
    assert "sweep stopped" not in sweep.stdout
    assert sweep.stdout.count("0/2") == 2, sweep.stdout
