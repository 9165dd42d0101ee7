"""Digital-twin accuracy on a real vLLM (CPU build, tiny local model): calibrate once, then predict and measure
several held-out workloads and print predicted vs measured TTFT, TPOT and E2E at p50/p90/p99, throughput, and the
error of each, and in the last column the error with ``twin check --anchor`` (the server's decode and prefill speed
re-read before and after each measurement and compared with the calibration's). Each workload is measured ``--repeat``
times (default 3) and compared with the median.

    .venv/bin/python benchmarks/twin_accuracy.py                 # starts its own vLLM (needs make vllm)
    .venv/bin/python benchmarks/twin_accuracy.py --url http://127.0.0.1:8000 [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: every request fits the tiny model's 2,048-token context as the server counts its prompts (≈ 1.7 of its tokens per
#: word of the load generator's estimate): the longest prompts here, 1,100 estimated tokens, are ≈ 1,880 there
WORKLOADS = [
    (
        "poisson 2/s, prompts 40–700",
        ["--rate", "2", "--requests", "40", "--input-tokens", "uniform:40:700", "--output-tokens", "40"],
    ),
    (
        "poisson 5/s, lognormal prompts",
        [
            "--rate",
            "5",
            "--requests",
            "60",
            "--input-tokens",
            "lognormal:200:0.8:max=1100",
            "--output-tokens",
            "uniform:16:64",
        ],
    ),
    (
        "closed loop 6, long prompts",
        ["--concurrency", "6", "--requests", "36", "--input-tokens", "1000", "--output-tokens", "32"],
    ),
    (
        "poisson 8/s, short prompts",
        ["--rate", "8", "--requests", "80", "--input-tokens", "64", "--output-tokens", "64"],
    ),
]


@contextlib.contextmanager
def server(url: str | None) -> Iterator[tuple[str, str]]:
    if url:
        yield url, ""
        return
    from tailscope.testing.tiny_model import ensure_tiny_model
    from tailscope.testing.vllm import find_vllm_python, start_vllm

    model_dir = ensure_tiny_model(Path(".cache/tiny-model"))
    log = Path(".cache/twin-accuracy-vllm.log")  # the server's output, for when it does not start
    with start_vllm(model_dir, find_vllm_python(), log_path=log, extra_args=("--num-gpu-blocks-override", "128")) as s:
        yield s.base_url, s.model


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with server(a.url) as (url, model), tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "db.duckdb")
        twin = Path(tmp) / "twin.yaml"
        model_args = ["--model", model] if model else []
        p = cli("calibrate", "--url", url, *model_args, "--out", str(twin), "--db", db)
        if p.returncode:
            raise SystemExit(p.stdout + p.stderr)
        print(p.stdout)
        print(f"{'workload':<34} {'metric':<18} {'predicted':>10} {'measured':>10} {'error':>8} {'anchored':>9}")
        for name, load in WORKLOADS:
            out = Path(tmp) / "check.json"
            cli(
                "twin",
                "check",
                "--calibration",
                str(twin),
                "--url",
                url,
                *model_args,
                *load,
                "--json",
                str(out),
                "--db",
                db,
                "--tolerance",
                "10",
                "--anchor",
                "--repeat",
                str(a.repeat),
            )
            result = json.loads(out.read_text())
            un = (result.get("anchor") or {}).get("unanchored_errors") or {}
            for r in result["rows"]:
                label = f"{r['metric']} {r['percentile']}".strip()
                m, u = r["measured"], un.get(f"{r['metric']}.{r['percentile']}")
                pred = "—" if m is None or u is None else f"{m * (1 + u):,.1f}"
                meas = "—" if m is None else f"{m:,.1f}"
                err = "—" if u is None else f"{u:+.0%}"
                anchored = "—" if r["error"] is None else f"{r['error']:+.0%}"
                print(f"{name:<34} {label:<18} {pred:>10} {meas:>10} {err:>8} {anchored:>9}")
                name = ""
            anchor = result.get("anchor") or {}
            if anchor:
                pf = anchor.get("prefill_factor")
                prefill = f", ×{pf:.2f} in prefill" if pf else ""
                df = anchor["decode_factor"]
                print(f"{'':<34} anchor: times ×{df:.2f} in decode{prefill} vs the calibration")
            steady = (result.get("steady_decode") or {}).get("ratio")
            if steady is not None:
                print(f"{'':<34} steady decode at equal batch: the server's gaps ×{steady:.2f} the twin's")


if __name__ == "__main__":
    main()
