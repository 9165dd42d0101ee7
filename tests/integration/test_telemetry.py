"""bench --telemetry-url: a scripted DCGM exporter (DCGM's text format) scraped beside the built-in engine over real
HTTP; its samples line up with the run and summary.gpu holds utilisation, memory, power and energy per output token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tailscope
from tailscope.store.runs import RunStore
from tailscope.testing.dcgm_exporter import DcgmConfig, DcgmExporter

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_dcgm_exporter_scraped_beside_the_engine(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    with DcgmExporter(DcgmConfig(gpus=2, util_pct=35.0, power_w=300.0, node=True, cpu_busy=0.5)) as exp:
        result = tailscope.bench(
            requests=40, concurrency=4, output_tokens=32, input_tokens=200, telemetry_url=exp.url, store=db
        )
    gpu = result.summary_dict()["gpu"]
    assert gpu["gpus"] == 2
    assert gpu["util_pct"]["mean"] == pytest.approx(35.0)
    assert gpu["memory_used_mib"]["max"] == 60_000
    assert gpu["memory_total_mib"] == 80_000
    assert gpu["memory_used_frac"]["max"] == pytest.approx(0.75)
    assert gpu["dram_active"]["mean"] == pytest.approx(0.55)
    assert gpu["power_w"]["mean"] == pytest.approx(600.0)  # two GPUs at 300 W
    assert gpu["cpu_busy_pct"] == pytest.approx(50.0, abs=1.0)
    # energy = 2 × 300 W × the time between the first and the last scrape (both within the run)
    times = sorted({s.t_ns for s in result.samples if s.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"})
    assert len(times) >= 2
    span_s = (times[-1] - times[0]) / 1e9
    assert gpu["energy_j"] == pytest.approx(600.0 * span_s, rel=0.25, abs=20.0)
    tokens = sum(r.output_tokens or 0 for r in result.records if r.ok)
    assert tokens == 40 * 32
    assert gpu["energy_per_output_token_j"] == pytest.approx(gpu["energy_j"] / tokens)
    end_ns = max(r.end_ns or 0 for r in result.records)
    assert 0 <= times[0] <= end_ns + 2_000_000_000  # on the run's clock
    assert gpu["scrapes"][exp.url]["ok"] >= 2
    # stored with the run: diagnose reads the GPU figures back from the store
    stored = RunStore(db).get_run(result.run.id)
    assert stored.summary["gpu"]["gpus"] == 2
    assert stored.run.settings["telemetry_urls"] == [exp.url]
    diagnosis = tailscope.diagnose(result.run.id, store=db)
    batching = next(b for b in diagnosis.tree("tpot_high").branches if "batch too small" in b.check)
    assert batching.verdict == "yes"  # 35 % GPU utilisation: the batch is too small
    assert "GPU utilisation mean 35 %" in batching.evidence


def test_cli_flag_is_repeatable_and_checked(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with DcgmExporter() as a, DcgmExporter(DcgmConfig(gpus=1, util_pct=95.0)) as b:
        p = subprocess.run(
            [sys.executable, "-m", "tailscope", "bench", "-n", "8", "-c", "2", "--output-tokens", "8",
             "--telemetry-url", a.url, "--telemetry-url", b.url, "--json", str(out), "-q", "--db",
             str(tmp_path / "db.duckdb")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    gpu = json.loads(out.read_text())["summary"]["gpu"]
    assert set(gpu["scrapes"]) == {a.url, b.url}
    assert gpu["gpus"] == 2  # both exporters label their GPU "0": the exporter's instance tells them apart
    assert gpu["util_pct"]["max"] == pytest.approx(95.0)
    bad = subprocess.run(
        [sys.executable, "-m", "tailscope", "bench", "-n", "1", "--telemetry-url", "gpu-host:9400"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "--telemetry-url 'gpu-host:9400'" in bad.stderr
