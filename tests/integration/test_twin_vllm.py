"""The digital twin on a real vLLM: calibrate, predict two workloads the calibration never saw, measure, compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tailscope.testing.judgement import Judgement

# calibrate (≈ 2 min) and two checks (≈ 3 min each; a re-drawn check adds as much): past the default 300 s. Alone:
# `make check` runs it after the rest of the suite, because beside the other tests the server's speed moved by ×1.5–3.5
# between repeats and its accuracy could not be judged (scripts/run_suite.sh)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.alone,
    pytest.mark.timeout(1200),
]

HELD_OUT = [
    # Poisson arrivals at two rates with a mix of prompt lengths (the probe used closed loops and fixed lengths)
    ("rate-low", ["--rate", "2", "--requests", "60", "--input-tokens", "uniform:40:700", "--output-tokens", "40"]),
    (
        "rate-high",
        ["--rate", "3.5", "--requests", "80", "--input-tokens", "uniform:40:500", "--output-tokens", "uniform:24:56"],
    ),
]


#: measurements per check (compared with their median): one run on this VM is one draw of a noisy machine
REPEAT = 5
#: the issue's targets: |predicted ÷ measured − 1| at most this, per (metric, percentile)
TARGETS = {("ttft_ms", "p50"): 0.25, ("ttft_ms", "p90"): 0.35, ("tpot_ms", "p50"): 0.25, ("tpot_ms", "p90"): 0.35}


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def spread(values: list[float]) -> float:
    """max ÷ min of one metric's repeated measurements: how far the machine moved while it was measured."""
    return max(values) / min(values) if values and min(values) > 0 else float("inf")


#: the widest spread of the repeats (and of the anchor's references) under which a miss is the twin's fault: past it
#: the same workload moved more between repeats than the targets allow, and the check says what it measured instead
STEADY_SPREAD = 1.4


def test_calibrated_twin_predicts_held_out_workloads(vllm_server, tmp_path: Path, judgement: Judgement) -> None:  # type: ignore[no-untyped-def]
    """End to end on the real server: calibrate, then predict and measure two held-out Poisson workloads.

    Asserts the issue's targets: predicted TTFT and TPOT p50 within 25 % of the measurement, p90 within 35 %
    (and throughput within 25 %). Each workload is measured five times (``--repeat 5``, new prompt text each time so
    the server's prefix cache cannot answer a repeat) and compared with the median; ``--anchor`` rescales the twin
    to the server's speed now vs during calibration. CPU timing noise on the 2-core VM is real (the same workload's
    TTFT p50 moves ±10 % between checks minutes apart, see docs/engine.md, "Measured"), so a workload that misses is
    checked once more on a new draw (seed 1), and one of the two checks must meet every target. When both miss on a
    machine that moved more than the targets between repeats (the repeats' or the anchor's spread above
    ``STEADY_SPREAD``, or a load above 0.75 × the CPUs), the accuracy is not judged: the run's summary carries the
    figures. The structural checks (verdict and exit code, repeats, throughput) always hold.
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
    # a step's fixed overhead is physical; the fit clamps it at 0 when a busy machine's noise swamps it
    assert doc["coefficients_us"]["step_overhead_us"] >= 0
    judgement.holds(
        doc["coefficients_us"]["step_overhead_us"] > 0, f"step overhead fitted {doc['coefficients_us']}", share=0.75
    )
    assert len(doc["speed"]["quantiles"]) == 21  # the machine's measured speed noise travels with the twin
    assert doc["fitted_on"]["anchor_tpot_ms"] > 0  # the references `twin check --anchor` compares the server with
    assert set(doc["fitted_on"]["anchor_lone_ttft_ms"]) == {64, 256, 768}
    for name, load in HELD_OUT:
        misses: list[str] = []
        noisy: list[str] = []
        for attempt, seed in enumerate(("0", "1")):
            out = tmp_path / f"{name}-{attempt}.json"
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
                "--seed",
                seed,
                "--anchor",
                "--repeat",
                str(REPEAT),
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
                    f"{k}: predicted {r['predicted']} measured {r['measured']} error {r['error']}"
                    for k, r in rows.items()
                )
                + f"\nrepeats: {result.get('repeats')}\nanchor: {result.get('anchor')}"
            )
            # the exit code follows the verdict; every repeat was measured; throughput is right
            assert (q.returncode == 0) == result["passed"], report
            assert len(result["measured_runs"]) == REPEAT
            assert abs(rows[("output_tokens_per_s", "")]["error"]) <= 0.25, f"{name}\n{report}"
            errors = {key: rows[key]["error"] for key in TARGETS}
            print(f"\n{name} check {attempt + 1}: " + ", ".join(f"{m} {p} {e:+.1%}" for (m, p), e in errors.items()))
            missed = [
                f"{m} {p}: error {e:+.1%} (target ±{TARGETS[(m, p)]:.0%})"
                for (m, p), e in errors.items()
                if abs(e) > TARGETS[(m, p)]
            ]
            if not missed:
                break
            repeats = result.get("repeats") or {}
            anchor = result.get("anchor") or {}
            spreads = {key: spread(repeats.get(key) or []) for key in ("ttft_ms.p50", "tpot_ms.p50")}
            spreads |= {f"anchor {k}": spread(anchor.get(k) or []) for k in ("measured_ttft_ms", "measured_tpot_ms")}
            noisy += [f"{k} spread {v:.2f}×" for k, v in spreads.items() if v > STEADY_SPREAD]
            if not judgement.quiet(0.75):
                noisy.append("load above 0.75 × CPUs")
            misses.append(f"{name}, check {attempt + 1} (seed {seed}): {'; '.join(missed)}\n{report}")
        # one more check of a new draw of the same workload when the first misses; one of the two must hold
        if len(misses) == 2 and noisy:
            first = [m.splitlines()[0] for m in misses]
            judgement.cannot_judge(f"twin accuracy not judged, the machine moved ({', '.join(noisy)}): {first}")
            continue
        judgement.holds(len(misses) < 2, "\n\n".join(misses), 0.75)
    assert (tmp_path / "rate-low.html").stat().st_size > 100_000  # the report embeds its chart library
