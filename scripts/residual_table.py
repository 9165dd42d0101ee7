"""Regenerate ``src/tailscope/engine/residuals.py``: the step model's out-of-configuration residuals, grouped.

The corpus is cross-validated by whole configurations (benchmarks/sim_accuracy.py's folds: each held-out
configuration's rows are predicted by coefficients fitted without it and without any copy of its measurements); the
log-ratio ``ln(predicted / measured)`` of every row's TTFT and TPOT is then summarised per group — (engine, GPU,
model family, mode), and the coarser groups the simulator falls back to when a group has too few rows — as its
5th, 50th and 95th percentiles. ``tailscope sim`` turns them into 90 % prediction intervals.

    python scripts/residual_table.py [CORPUS_CSV] [--folds loco|K] [--jobs 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.residuals import MIN_ROWS, model_family

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "tailscope" / "engine" / "residuals_table.py"


def _sim_accuracy():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sim_accuracy", ROOT / "benchmarks" / "sim_accuracy.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sim_accuracy"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=None)
    ap.add_argument("--folds", default="loco")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    acc = _sim_accuracy()
    path = Path(args.csv) if args.csv else acc.find_corpus()
    if path is None or not path.is_file():
        print("no corpus: pass the path to silicon_dev.csv", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows, ttft, tpot = acc.cross_validate(path, args.folds, args.jobs)
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    configs: dict[tuple[str, str, str, str], set[tuple[str, ...]]] = defaultdict(set)
    for i, r in enumerate(rows):
        if not (np.isfinite(ttft[i]) and np.isfinite(tpot[i]) and r.ttft_ms > 0 and r.tpot_ms > 0):
            continue
        gpu = resolve_gpu(r.system).id
        fam = model_family(r.model)
        for key in (
            (r.engine, gpu, fam, r.mode),
            (r.engine, "*", fam, r.mode),
            (r.engine, gpu, "*", r.mode),
            (r.engine, "*", "*", r.mode),
            ("*", "*", "*", r.mode),
        ):
            groups[key].append(i)
            configs[key].add(r.config_key)
    m_ttft = np.array([r.ttft_ms / 1e3 for r in rows])
    m_tpot = np.array([r.tpot_ms / 1e3 for r in rows])
    folds = "leave-one-configuration-out" if args.folds == "loco" else args.folds + "-fold by configuration"
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
        f'    "command": "python scripts/residual_table.py --folds {args.folds}",',
        f'    "corpus": "{path.name}: {len(rows)} rows",',
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
