"""Regenerate ``src/tailscope/engine/residuals_table.py``: the step model's out-of-configuration residuals, grouped.

The corpus is cross-validated by whole configurations with :func:`tailscope.validate_step_model` (each held-out
configuration's rows are predicted by coefficients fitted without it and without any copy of its measurements —
the folds of ``benchmarks/sim_accuracy.py``); the log-ratio ``ln(predicted / measured)`` of every row's TTFT and
TPOT is then summarised per group — (engine, GPU, model family, mode), and the coarser groups the simulator falls
back to when a group has too few rows — as its 5th, 50th and 95th percentiles. ``tailscope sim`` turns them into
90 % prediction intervals. ``--from-json`` reuses the held-out predictions a ``benchmarks/sim_accuracy.py --json``
run wrote (its rows joined to the corpus by id) instead of cross-validating again.

    python scripts/residual_table.py [CORPUS_CSV] [--folds loco|K] [--jobs 1] [--from-json SIM_ACCURACY_JSON]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tailscope
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.residuals import MIN_ROWS, model_family
from tailscope.io.corpus import load_corpus
from tailscope.testing.calibration import find_corpus

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "tailscope" / "engine" / "residuals_table.py"


@dataclass(frozen=True, slots=True)
class Residual:
    """One held-out row: its group facts, measured and predicted TTFT/TPOT (ms)."""

    engine: str
    gpu: str
    model: str
    mode: str
    configuration: tuple[str, ...]
    ttft_ms: float
    tpot_ms: float
    pred_ttft_ms: float
    pred_tpot_ms: float


def cross_validated(path: Path, folds: str, jobs: int) -> list[Residual]:
    """Held-out predictions of every row from the public cross-validation."""
    v = tailscope.validate_step_model(path, folds=folds, jobs=jobs)
    return [
        Residual(
            r.engine,
            r.gpu,
            r.model,
            r.mode,
            r.configuration,
            r.measured_ttft_ms,
            r.measured_tpot_ms,
            r.predicted_ttft_ms,
            r.predicted_tpot_ms,
        )
        for r in v.rows
        if r.predicted_ttft_ms is not None and r.predicted_tpot_ms is not None
    ]


def from_benchmark_json(path: Path, json_path: Path) -> tuple[list[Residual], str]:
    """Held-out predictions a ``sim_accuracy.py --json`` run wrote, joined to the corpus by row id; and its folds."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    pred = {r["id"]: r for r in data["rows"]}
    out: list[Residual] = []
    for c in load_corpus(path):
        p = pred.get(c.id)
        if p is None or p.get("pred_ttft_ms") is None or p.get("pred_tpot_ms") is None:
            continue
        out.append(
            Residual(
                c.engine,
                c.system,
                c.model,
                c.mode,
                c.config_key,
                c.ttft_ms,
                c.tpot_ms,
                float(p["pred_ttft_ms"]),
                float(p["pred_tpot_ms"]),
            )
        )
    return out, str(data.get("folds", "loco"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=None)
    ap.add_argument("--folds", default="loco")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--from-json", type=Path, default=None, help="a benchmarks/sim_accuracy.py --json output")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    path = Path(args.csv) if args.csv else find_corpus(ROOT)
    if path is None or not path.is_file():
        print("no corpus: pass the path to silicon_dev.csv", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.from_json is not None:
        rows, folds_arg = from_benchmark_json(path, args.from_json)
        command = (
            f"benchmarks/sim_accuracy.py --folds {folds_arg} --json OUT, then scripts/residual_table.py --from-json OUT"
        )
    else:
        rows = cross_validated(path, args.folds, args.jobs)
        folds_arg = str(args.folds)
        command = f"python scripts/residual_table.py --folds {folds_arg}"
    n_corpus = len(load_corpus(path))
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    configs: dict[tuple[str, str, str, str], set[tuple[str, ...]]] = defaultdict(set)
    for i, r in enumerate(rows):
        if not (
            np.isfinite(r.pred_ttft_ms) and np.isfinite(r.pred_tpot_ms) and r.pred_ttft_ms > 0 and r.pred_tpot_ms > 0
        ):
            continue
        gpu = resolve_gpu(r.gpu).id
        fam = model_family(r.model)
        for key in (
            (r.engine, gpu, fam, r.mode),
            (r.engine, "*", fam, r.mode),
            (r.engine, gpu, "*", r.mode),
            (r.engine, "*", "*", r.mode),
            ("*", "*", "*", r.mode),
        ):
            groups[key].append(i)
            configs[key].add(r.configuration)
    m_ttft = np.array([r.ttft_ms for r in rows])
    m_tpot = np.array([r.tpot_ms for r in rows])
    ttft = np.array([r.pred_ttft_ms for r in rows])
    tpot = np.array([r.pred_tpot_ms for r in rows])
    folds = "leave-one-configuration-out" if folds_arg == "loco" else folds_arg + "-fold by configuration"
    kind = "tuple[int, int, tuple[float, float, float], tuple[float, float, float]]"
    lines = [
        '"""Out-of-configuration residuals of the step model, grouped — generated, do not edit.',
        "",
        "Regenerate with ``python scripts/residual_table.py`` after refitting the coefficients; :mod:`.residuals`",
        "reads it.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "#: how the table was made",
        "SOURCE: dict[str, str] = {",
        f'    "command": {json.dumps(command)},',
        f'    "corpus": "{path.name}: {n_corpus} rows, {len(rows)} predicted",',
        f'    "folds": "{folds}",',
        "}",
        "",
        "#: (engine, GPU, model family, mode) → (rows, configurations, TTFT (q05, q50, q95), TPOT (q05, q50, q95)) of",
        "#: ln(predicted / measured); ``*`` = any",
        f"TABLE: dict[tuple[str, str, str, str], {kind}] = {{",
    ]
    for key in sorted(groups):
        idx = np.array(groups[key])
        if idx.size < MIN_ROWS:
            continue
        a = np.log(ttft[idx] / m_ttft[idx])
        b = np.log(tpot[idx] / m_tpot[idx])
        qa = tuple(round(float(x), 4) for x in np.percentile(a, [5, 50, 95]))
        qb = tuple(round(float(x), 4) for x in np.percentile(b, [5, 50, 95]))
        name = "(" + ", ".join(json.dumps(k) for k in key) + ")"
        lines.append(f"    {name}: ({idx.size}, {len(configs[key])}, {qa!r}, {qb!r}),")
    lines.append("}")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
