"""Accuracy of the simulated engine against published measurements (prints a table; never fails).

Each row of ``shared/calibration/published_points.csv`` (or the CSV given as the first argument) is a closed-loop
run at fixed input/output lengths and concurrency; we simulate the same run with the built-in defaults (or
``--calibration FILE``) and report the signed error of mean TTFT and mean TPOT.

    python benchmarks/sim_accuracy.py [CSV] [--calibration FILE] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from tailscope.engine.calibration import load_calibration
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.metrics.summary import summarize
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

DEFAULT_CSV = Path(__file__).resolve().parents[1] / ".." / "shared" / "calibration" / "published_points.csv"


def simulate_point(row: dict[str, str], calibration: Any, *, rounds: int = 6) -> dict[str, Any]:
    """Simulate one closed-loop point; ``rounds`` × concurrency requests, the first round is warmup."""
    conc = int(row["concurrency"])
    cluster = ClusterSpec(
        resolve_model(row["model"]),
        resolve_gpu(row["gpu"]),
        tp=int(row["tp"]),
        weights_dtype=row.get("weights_dtype") or None,
        calibration=calibration,
        model_id=row["model"],
    )
    n = conc * rounds
    isl, osl = int(row["input_tokens"]), int(row["output_tokens"])
    specs = (RequestSpec(i, isl, osl, warmup=i < conc, seed=i) for i in range(n))
    sim = Simulation(cluster, specs, concurrency=conc)
    recs = list(sim.run())
    s = summarize(recs)
    ttft, tpot = s.ttft_ms.mean, s.tpot_ms.mean
    m_ttft, m_tpot = float(row["ttft_ms"]), float(row["tpot_ms"])
    return {
        **row,
        "sim_ttft_ms": ttft,
        "sim_tpot_ms": tpot,
        "ttft_err": (ttft - m_ttft) / m_ttft if ttft is not None else None,
        "tpot_err": (tpot - m_tpot) / m_tpot if tpot is not None else None,
        "preemptions": sim.result.preemptions,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV))
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cal = load_calibration(args.calibration)
    if not Path(args.csv).is_file():
        print(f"no calibration points at {args.csv}; pass the CSV path as the first argument", file=sys.stderr)
        return 2
    with open(args.csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    results = [simulate_point(r, cal) for r in rows]
    hdr = (
        f"{'model':12s} {'gpu':9s} tp {'isl':>5s} {'osl':>5s} {'conc':>4s} | {'TTFT ms':>8s} {'sim':>8s} {'err':>7s} | "
    )
    hdr += f"{'TPOT ms':>8s} {'sim':>7s} {'err':>7s}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        print(
            f"{r['model']:12s} {r['gpu']:9s} {r['tp']:>2s} {r['input_tokens']:>5s} {r['output_tokens']:>5s} "
            f"{r['concurrency']:>4s} | {float(r['ttft_ms']):8.1f} {r['sim_ttft_ms']:8.1f} {r['ttft_err']:+7.1%} | "
            f"{float(r['tpot_ms']):8.2f} {r['sim_tpot_ms']:7.2f} {r['tpot_err']:+7.1%}"
        )
    mean_ttft = sum(abs(r["ttft_err"]) for r in results) / len(results)
    mean_tpot = sum(abs(r["tpot_err"]) for r in results) / len(results)
    print(f"\nmean |error|: TTFT {mean_ttft:.1%}  TPOT {mean_tpot:.1%}  over {len(results)} points")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"points": results, "mean_abs_ttft_err": mean_ttft, "mean_abs_tpot_err": mean_tpot}, indent=2),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
