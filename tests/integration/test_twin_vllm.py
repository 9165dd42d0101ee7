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
    ("rate-low", ["--rate", "2", "--requests", "60", "--input-tokens", "uniform:40:700", "--output-tokens", "40"]),
    (
        "rate-high",
        ["--rate", "3.5", "--requests", "80", "--input-tokens", "uniform:40:500", "--output-tokens", "uniform:24:56"],
    ),
]


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_calibrated_twin_predicts_held_out_workloads(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """End to end on the real server: calibrate, then predict and measure two held-out Poisson workloads.

    Each workload is measured three times (``--repeat 3``) and compared with the median, and ``--anchor`` rescales
    the twin's decode costs by the server's decode speed now vs during calibration (the same small reference stream
    measured both times). The issue's targets (TTFT and TPOT p50 within 25 %, p90 within 35 %) are what
    ``benchmarks/twin_accuracy.py`` reports; this test asserts a factor of two at p50 and p90. On this 2-core VM the
    errors of the same check move by ±20 points from one try to the next (a fixed CPU loop takes 22–44 ms by the
    second; vLLM CPU's three processes and the client share the two cores), and the twin over-predicts TTFT p50 of
    busy open-loop traffic by up to +61 % (measured in a clean CI run: 45 vs 28 ms, the three repeats agreeing), so
    a CI gate at the targets would fail for reasons the issue note explains.
    """
    db = str(tmp_path / "db.duckdb")
    twin = tmp_path / "twin.yaml"
    p = cli("calibrate", "--url", vllm_server.base_url, "--model", vllm_server.model, "--out", str(twin), "--db", db)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = yaml.safe_load(twin.read_text())
    # the KV capacity is the server's own (the session server runs with --num-gpu-blocks-override 128)
    assert doc["server"]["num_blocks"] == 128
    assert doc["server"]["block_size"] == 128
    assert doc["server"]["prompt_scale"] > 1.0  # the tiny tokenizer splits the synthesized words
    assert doc["fitted_on"]["decode_observations"] >= 10
    assert doc["coefficients_us"]["step_overhead_us"] > 0
    assert len(doc["speed"]["quantiles"]) == 21  # the machine's measured speed noise travels with the twin
    assert doc["fitted_on"]["anchor_tpot_ms"] > 0  # the reference `twin check --anchor` compares the server with
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
            "--anchor",
            "--repeat",
            "3",
            "--tolerance",
            "1.0",
            "--json",
            str(out),
            *(["--html", str(tmp_path / f"{name}.html")] if name == "rate-low" else []),
            "--db",
            db,
        )
        assert out.exists(), q.stdout + q.stderr
        result = json.loads(out.read_text())
        rows = {(r["metric"], r["percentile"]): r for r in result["rows"]}
        report = (
            "\n".join(
                f"{k}: predicted {r['predicted']} measured {r['measured']} error {r['error']}" for k, r in rows.items()
            )
            + f"\nrepeats: {result.get('repeats')}\nanchor: {result.get('anchor')}"
        )
        # the exit code follows the verdict
        assert (q.returncode == 0) == result["passed"], report
        assert len(result["measured_runs"]) == 3
        for metric in ("ttft_ms", "tpot_ms"):
            for pct in ("p50", "p90"):
                r = rows[(metric, pct)]
                assert 0.5 <= r["predicted"] / r["measured"] <= 2.0, f"{name} {metric} {pct}\n{report}"
        assert abs(rows[("output_tokens_per_s", "")]["error"]) <= 0.25, f"{name}\n{report}"
    assert (tmp_path / "rate-low.html").stat().st_size > 100_000  # the report embeds its chart library
