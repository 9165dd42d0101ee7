"""``tailscope bench`` is a CI citizen: it exits non-zero when an SLO fails or too many requests fail."""

from __future__ import annotations

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
