"""The digital twin on a real vLLM: calibrate, predict two workloads the calibration never saw, measure, compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow]

HELD_OUT = [
    # Poisson arrivals at two rates with a mix of prompt lengths (the probe used closed loops and fixed lengths)
    ("rate-low", ["--rate", "2", "--requests", "30", "--input-tokens", "uniform:40:700", "--output-tokens", "40"]),
    (
        "rate-high",
        [
            "--rate",
            "5",
            "--requests",
            "40",
            "--input-tokens",
            "lognormal:200:0.8:max=1500",
            "--output-tokens",
            "uniform:16:64",
        ],
    ),
]


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_calibrated_twin_predicts_held_out_workloads(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "db.duckdb")
    twin = tmp_path / "twin.yaml"
    p = cli("calibrate", "--url", vllm_server.base_url, "--model", vllm_server.model, "--out", str(twin), "--db", db)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = yaml.safe_load(twin.read_text())
    # the KV capacity is the server's own (the session server runs with --num-gpu-blocks-override 128)
    assert doc["server"]["num_blocks"] == 128
    assert doc["server"]["block_size"] == 128
    assert doc["fitted_on"]["decode_observations"] >= 10
    for name, load in HELD_OUT:
        out = tmp_path / f"{name}.json"
        q = cli(
            "twin",
            "check",
            "--calibration",
            str(twin),
            "--url",
            vllm_server.base_url,
            "--model",
            vllm_server.model,
            *load,
            "--tolerance",
            "0.25",
            "--json",
            str(out),
            "--db",
            db,
        )
        assert out.exists(), q.stdout + q.stderr
        rows = {(r["metric"], r["percentile"]): r for r in json.loads(out.read_text())["rows"]}
        report = "\n".join(
            f"{k}: predicted {r['predicted']} measured {r['measured']} error {r['error']}" for k, r in rows.items()
        )
        for metric in ("ttft_ms", "tpot_ms"):
            assert abs(rows[(metric, "p50")]["error"]) <= 0.25, f"{name}\n{report}"
            assert abs(rows[(metric, "p90")]["error"]) <= 0.35, f"{name}\n{report}"
