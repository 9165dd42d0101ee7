"""Fit the trained step model's coefficients to the corpus and write ``src/tailscope/engine/step_params.py``.

    python scripts/fit_step_model.py [CORPUS_CSV] [--out src/tailscope/engine/step_params.py] [--check]

The corpus defaults to ``shared/calibration/silicon_dev.csv`` next to this checkout (or a parent folder). Every row
is used (the rows whose measurement is repeated under other encodings once); the fit is deterministic, so the same
corpus gives the same file. ``--check`` only reports whether the committed file is what the corpus gives.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from tailscope.engine.fit import CLASSES, ENGINES, FIELDS, Dataset, fit, predict
from tailscope.io.corpus import duplicate_groups, load_corpus, observations
from tailscope.testing.calibration import find_corpus

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "tailscope" / "engine" / "step_params.py"


def unique_rows(rows: list) -> list[int]:  # type: ignore[type-arg]
    """One index per distinct measurement (the first row that carries it)."""
    return sorted(idx[0] for idx in duplicate_groups(rows).values())


def render(table: dict[tuple[str, str], dict[str, float]], meta: dict[str, str]) -> str:
    lines = [
        '"""Learned step-model coefficients per (engine, precision class) — generated, do not edit.',
        "",
        "Regenerate with ``python scripts/fit_step_model.py`` (the command, the corpus and the fit's figures are in",
        "``FIT``). The values are :class:`~tailscope.engine.step_terms.Efficiencies` fields: fractions of a peak and",
        "fixed costs in ms/µs, shared by every model and GPU; docs/engine.md explains them.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from tailscope.engine.step_terms import Efficiencies",
        "",
        "#: how the table was made",
        "FIT: dict[str, str] = {",
    ]
    for k, v in meta.items():
        lines.append(f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    lines.append("}")
    lines.append("")
    # a coefficient the fit ties across an engine's precision classes is written once per engine; the rest per class
    engines = list(dict.fromkeys(e for e, _ in table))
    shared: dict[str, dict[str, float]] = {}
    for e in engines:
        rows = [v for (ee, _), v in table.items() if ee == e]
        shared[e] = {f: rows[0][f] for f in FIELDS if all(r[f] == rows[0][f] for r in rows)}
    lines.append("#: engine → the coefficients its precision classes share")
    lines.append("BY_ENGINE: dict[str, dict[str, float]] = {")
    for e in engines:
        lines.append(f"    {json.dumps(e)}: {{")
        lines += [f"        {json.dumps(f)}: {v!r}," for f, v in shared[e].items()]
        lines.append("    },")
    lines.append("}")
    lines.append("")
    lines.append("#: (engine, precision class) → the coefficients that depend on the precision")
    lines.append("BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {")
    for (e, c), values in table.items():
        own = ", ".join(f"{json.dumps(f)}: {values[f]!r}" for f in FIELDS if f not in shared[e])
        lines.append(f"    ({json.dumps(e)}, {json.dumps(c)}): {{{own}}},")
    lines.append("}")
    lines.append("")
    lines.append("#: (engine, precision class) → coefficient → value")
    lines.append(
        "TABLE: dict[tuple[str, str], dict[str, float]] = "
        "{(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}"
    )
    lines += [
        "",
        "",
        "def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:",
        '    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""',
        '    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}',
        "    return Efficiencies(**values)",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=None)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--theta-out", default=None, help="also save the fitted parameter vector (numpy .npy)")
    args = ap.parse_args(argv)
    path = Path(args.csv) if args.csv else find_corpus(ROOT)
    if path is None or not path.is_file():
        print("no corpus: pass the path to silicon_dev.csv", file=sys.stderr)
        return 2
    rows = load_corpus(path)
    keep = unique_rows(rows)
    obs = observations(rows)
    ds = Dataset([obs[i] for i in keep])
    t0 = time.perf_counter()
    res = fit(ds, on_iteration=lambda i, loss: print(f"iteration {i}: loss {loss:.3f}", file=sys.stderr))
    secs = time.perf_counter() - t0
    if args.theta_out:
        np.save(args.theta_out, res.theta)
    full = Dataset(obs)
    ttft, tpot = predict(full, res.params.design(full), res.theta)
    agg = ~full.disagg

    def mape(p: np.ndarray, m: np.ndarray) -> str:
        return f"{float(np.mean(np.abs(p / m - 1))):.1%}"

    meta = {
        "command": "python scripts/fit_step_model.py",
        "corpus": f"{path.name}: {len(rows)} rows, {len(keep)} distinct measurements",
        "fit": f"{res.iterations} Levenberg-Marquardt iterations, loss {res.loss:.2f}, {secs:.0f} s",
        "in_sample_agg": f"TTFT MAPE {mape(ttft[agg], full.ttft[agg])}, TPOT {mape(tpot[agg], full.tpot[agg])}",
        "in_sample_disagg": f"TTFT MAPE {mape(ttft[~agg], full.ttft[~agg])}, TPOT {mape(tpot[~agg], full.tpot[~agg])}",
        "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
    }
    text = render({(e, c): res.table()[(e, c)] for e in ENGINES for c in CLASSES}, meta)
    out = Path(args.out)
    if args.check:
        marker = "BY_ENGINE:"  # the coefficients, not the fit's timing
        same = out.is_file() and out.read_text(encoding="utf-8").partition(marker)[2] == text.partition(marker)[2]
        print("up to date" if same else "differs from the committed file")
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}: in-sample aggregated {meta['in_sample_agg']}; disaggregated {meta['in_sample_disagg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
