"""Accuracy of the step model where nothing was fitted: leave-one-configuration-out on the corpus (prints; never fails).

A configuration is model × GPU × engine × precision × mode (85 in ``shared/calibration/silicon_dev.csv``). For each
one, the coefficients are refitted on every other configuration — without the held-out rows and without the copies of
their measurements that the export repeats under other names — and the held-out rows are predicted with the
steady-state closed loop: :func:`tailscope.validate_step_model`. Printed: TTFT and TPOT MAPE per configuration, per
engine and overall, aggregated and disaggregated rows separately (where the error is: per GPU, model family,
concurrency band, the speculative decoding the public recipe states (``HeldOutRow.spec``, ``io/corpus.py`` rule
10) and, disaggregated, whether the corpus records the pools' worker counts, repeats them from a recorded row's
duplicate, takes them from the public recipe or they are imputed — ``HeldOutRow.workers``, rules 5 and 10); the
model before this one (the plain roofline with its built-in efficiencies, fitted on 15 points of one configuration)
in the same harness; the corpus's own repeat measurements (setups it describes identically, measured more than
once: :func:`tailscope.measurement_repeatability`) — the floor under any model's MAPE on those rows — next to the
model's held-out error on the same rows; and, with ``--sim N``, N rows simulated end to end (``--sim-mode``: aggregated,
disaggregated or both)
(:func:`tailscope.simulate`, the committed coefficients) next to the analytic closed loop for the same rows — an
internal check of the simulator against the closed form it is fitted through, so that figure comes from
:mod:`tailscope.testing.closed_loop_check`, not from the public API.

    python benchmarks/sim_accuracy.py [CORPUS_CSV] [--jobs 2] [--folds loco|K] [--max-folds N] [--sim 12] [--json OUT]
        [--sim-only] [--sim-concurrency 64-256] [--sim-desync on|off|both] [--sim-mode agg|disagg|both]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import tailscope
from tailscope import HeldOutRow
from tailscope.testing.calibration import find_corpus
from tailscope.testing.closed_loop_check import analytic_closed_loop

ROOT = Path(__file__).resolve().parents[1]


def _fold_line(done: int, total: int, rows: int, secs: float) -> None:
    print(f"fold {done}/{total}: {rows} rows, fit {secs:.0f} s", file=sys.stderr)


# ---- end to end against the analytic figure -----------------------------------------------------------------------
def simulate_rows(
    rows: Sequence[HeldOutRow], n: int, *, lo: int = 1, hi: int = 256, noise: bool = True, mode: str = "agg"
) -> list[dict[str, Any]]:
    """``n`` rows of ``mode`` (``agg``, ``disagg``; spread over the configurations, ``lo`` ≤ concurrency ≤ ``hi``)
    through the simulator (its closed-loop noise on or off) and the closed loop."""
    by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r.simulate_options is not None and r.mode == mode and lo <= r.concurrency <= hi:
            by_key[r.configuration].append(i)
    keys = sorted(by_key)
    picks = [by_key[keys[(j * 7) % len(keys)]][(j * 5) % len(by_key[keys[(j * 7) % len(keys)]])] for j in range(n)]
    out: list[dict[str, Any]] = []
    for i in dict.fromkeys(picks):
        r = rows[i]
        assert r.simulate_options is not None
        a_ttft, a_tpot = analytic_closed_loop(r.simulate_options)
        t0 = time.perf_counter()
        s = tailscope.simulate(
            **r.simulate_options, requests=r.concurrency * 10, warmup=r.concurrency * 2, closed_loop_noise=noise
        ).summary
        wall = time.perf_counter() - t0
        out.append(
            {
                "id": r.id,
                "options": r.simulate_options,
                "measured_ttft_ms": r.measured_ttft_ms,
                "measured_tpot_ms": r.measured_tpot_ms,
                "analytic_ttft_ms": a_ttft,
                "analytic_tpot_ms": a_tpot,
                "sim_ttft_ms": s.ttft_ms.mean,
                "sim_tpot_ms": s.tpot_ms.mean,
                "sim_wall_s": wall,
                "concurrency": r.concurrency,
            }
        )
    return out


# ---- reporting ----------------------------------------------------------------------------------------------------
def _band(c: int) -> str:
    for hi in (1, 4, 16, 64, 256, 1024):
        if c <= hi:
            return f"concurrency <= {hi}"
    return "concurrency > 1024"


def _family(model: str) -> str:
    name = model.split("/")[-1].lower()
    for fam in ("deepseek", "qwen3.5", "qwen3-235b", "qwen3-32b", "llama-3.1-8b", "llama-3.1-70b", "gpt-oss", "kimi"):
        if name.startswith(fam):
            return fam
    return name.split("-")[0]


def _natural(key: str) -> tuple[str, int]:
    digits = "".join(ch for ch in key.split()[-1] if ch.isdigit())
    return (key.rstrip("0123456789"), int(digits) if digits else 0)


def _deployment(r: HeldOutRow) -> str | None:
    if r.mode != "disagg":
        return None  # aggregated rows record their deployment
    return {
        "recorded": "workers recorded",
        "duplicate": "workers of a recorded duplicate",
        "recipe": "workers of the public recipe",
    }.get(r.workers, "workers imputed")


def _speculative(r: HeldOutRow) -> str:
    """Rows by the speculative decoding their public recipe states (``io/corpus.py`` rule 10)."""
    return f"recipe {r.spec}" if r.spec else "no recipe"


#: where the error is: by GPU, model family, concurrency band, (disaggregated) where the pools' worker counts come
#: from, and whether the run decoded speculatively (printed per mode)
_BREAKDOWNS: tuple[tuple[str, Any], ...] = (
    ("gpu", lambda r: r.gpu),
    ("family", lambda r: _family(r.model)),
    ("load", lambda r: _band(r.concurrency)),
    ("deployment", _deployment),
    ("decoding", _speculative),
)


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred)
    return float(np.mean(np.abs(pred[ok] / meas[ok] - 1))) if ok.any() else float("nan")


def _column(rows: Sequence[HeldOutRow], name: str) -> np.ndarray:
    """A figure of every row in ms (NaN where there is none)."""
    return np.array([np.nan if (v := getattr(r, name)) is None else v for r in rows], dtype=float)


def report(rows: Sequence[HeldOutRow], ttft: np.ndarray, tpot: np.ndarray, title: str) -> dict[str, Any]:
    m_ttft = _column(rows, "measured_ttft_ms")
    m_tpot = _column(rows, "measured_tpot_ms")
    out: dict[str, Any] = {"title": title, "modes": {}, "configs": []}
    print(f"\n## {title}\n")
    for mode in ("agg", "disagg"):
        idx = np.array([i for i, r in enumerate(rows) if r.mode == mode and np.isfinite(ttft[i])])
        if idx.size == 0:
            continue
        by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i in idx:
            by_key[rows[i].configuration].append(int(i))
        print(f"{'configuration (' + mode + ')':66s} {'rows':>5s} {'TTFT MAPE':>10s} {'TPOT MAPE':>10s}")
        for key in sorted(by_key, key=lambda k: (k[2], k[0], k[1], k[3])):
            g = np.array(by_key[key])
            a, b = _mape(ttft[g], m_ttft[g]), _mape(tpot[g], m_tpot[g])
            name = f"{key[0].split('/')[-1]} · {key[1]} · {key[2]} · {key[3]}"
            print(f"{name:66s} {g.size:5d} {a:10.1%} {b:10.1%}")
            out["configs"].append({"config": list(key), "rows": int(g.size), "ttft_mape": a, "tpot_mape": b})
        per_engine = {}
        for eng in ("vllm", "sglang", "trtllm"):
            g = np.array([i for i in idx if rows[i].engine == eng])
            if g.size:
                per_engine[eng] = (int(g.size), _mape(ttft[g], m_ttft[g]), _mape(tpot[g], m_tpot[g]))
                print(f"{'  all ' + eng:66s} {g.size:5d} {per_engine[eng][1]:10.1%} {per_engine[eng][2]:10.1%}")
        breakdown: dict[str, dict[str, tuple[int, float, float, float, float]]] = {}
        for label, keyf in _BREAKDOWNS:
            groups: dict[str, list[int]] = defaultdict(list)
            for i in idx:
                if (key := keyf(rows[i])) is not None:
                    groups[key].append(int(i))
            if not groups:
                continue
            breakdown[label] = {}
            for k in sorted(groups, key=_natural):
                g = np.array(groups[k])
                rt, rp = ttft[g] / m_ttft[g] - 1, tpot[g] / m_tpot[g] - 1
                v = (int(g.size), _mape(ttft[g], m_ttft[g]), _mape(tpot[g], m_tpot[g]), float(np.median(rt)),
                     float(np.median(rp)))  # fmt: skip
                breakdown[label][k] = v
                name = f"  {label} {k}"
                print(f"{name:66s} {v[0]:5d} {v[1]:10.1%} {v[2]:10.1%}   (median error {v[3]:+.0%} / {v[4]:+.0%})")
        a, b = _mape(ttft[idx], m_ttft[idx]), _mape(tpot[idx], m_tpot[idx])
        med_a = float(np.median(np.abs(ttft[idx] / m_ttft[idx] - 1)))
        med_b = float(np.median(np.abs(tpot[idx] / m_tpot[idx] - 1)))
        print(f"{'ALL ' + mode:66s} {idx.size:5d} {a:10.1%} {b:10.1%}   (median |error| {med_a:.1%} / {med_b:.1%})\n")
        out["modes"][mode] = {
            "rows": int(idx.size),
            "ttft_mape": a,
            "tpot_mape": b,
            "ttft_median_abs_err": med_a,
            "tpot_median_abs_err": med_b,
            "per_engine": per_engine,
            "breakdown": breakdown,
        }
    return out


def print_repeatability(path: Path, rows: Sequence[HeldOutRow]) -> list[dict[str, Any]]:
    """The corpus against itself (:func:`tailscope.measurement_repeatability`) next to the model on the same rows."""
    print("\n## the corpus's own repeat measurements (no model): each predicted by the others of its setup\n")
    by_id = {r.id: r for r in rows}
    out = []
    for rep in tailscope.measurement_repeatability(path):
        held = [by_id[i] for i in rep.row_ids if i in by_id and by_id[i].predicted_ttft_ms is not None]
        model = (
            float(np.mean([abs((r.predicted_ttft_ms or 0) / r.measured_ttft_ms - 1) for r in held])),
            float(np.mean([abs((r.predicted_tpot_ms or 0) / r.measured_tpot_ms - 1) for r in held])),
        ) if held else (float("nan"), float("nan"))  # fmt: skip
        scope = "one engine version" if rep.same_version else "across versions"
        print(
            f"{rep.mode:7s} {scope:19s} {rep.groups:4d} setups, {rep.measurements:4d} measurements: TTFT / TPOT MAPE "
            f"{rep.ttft_mape:6.1%} / {rep.tpot_mape:5.1%} (median {rep.ttft_median:5.1%} / {rep.tpot_median:5.1%});"
            f" the model held out on their {len(held)} rows {model[0]:6.1%} / {model[1]:5.1%}"
        )
        out.append({"mode": rep.mode, "same_version": rep.same_version, "setups": rep.groups,
                    "measurements": rep.measurements, "ttft_mape": rep.ttft_mape, "tpot_mape": rep.tpot_mape,
                    "model_rows": len(held), "model_ttft_mape": model[0], "model_tpot_mape": model[1]})  # fmt: skip
    return out


def print_sim_errors(sims: list[dict[str, Any]]) -> None:
    """Sim against the analysis, and both against the measurements (MAPE), over all rows and those ≥ 64 clients."""
    for label, sel in (("all", sims), ("concurrency >= 64", [s for s in sims if s["concurrency"] >= 64])):
        if not sel:
            continue
        d_ttft = [abs(s["sim_ttft_ms"] / s["analytic_ttft_ms"] - 1) for s in sel]
        d_tpot = [abs(s["sim_tpot_ms"] / s["analytic_tpot_ms"] - 1) for s in sel]
        err = {
            k: (np.mean([abs(s[f"{k}_ttft_ms"] / s["measured_ttft_ms"] - 1) for s in sel]),
                np.mean([abs(s[f"{k}_tpot_ms"] / s["measured_tpot_ms"] - 1) for s in sel]))
            for k in ("sim", "analytic")
        }  # fmt: skip
        print(
            f"{label} ({len(sel)} rows): sim vs analytic TTFT mean |difference| {np.mean(d_ttft):.1%} (max "
            f"{np.max(d_ttft):.1%}), TPOT {np.mean(d_tpot):.1%} (max {np.max(d_tpot):.1%}); against the "
            f"measurements, MAPE TTFT / TPOT: sim {err['sim'][0]:.1%} / {err['sim'][1]:.1%}, analytic "
            f"{err['analytic'][0]:.1%} / {err['analytic'][1]:.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=None)
    ap.add_argument("--folds", default="loco", help="loco (one configuration per fold) or K (K folds)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-folds", type=int, default=None, help="evaluate only the first N folds (a quick look)")
    ap.add_argument("--sim", type=int, default=0, help="also simulate N rows end to end (of each --sim-mode)")
    ap.add_argument("--sim-mode", choices=("agg", "disagg", "both"), default="agg", help="the rows --sim picks")
    ap.add_argument("--sim-concurrency", default="1-256", help="LO-HI: the clients of the rows --sim picks")
    ap.add_argument("--sim-desync", choices=("on", "off", "both"), default="on", help="closed-loop noise in --sim")
    ap.add_argument("--sim-only", action="store_true", help="--sim without the cross-validation (one fold is fitted)")
    ap.add_argument("--no-old", action="store_true", help="skip the previous model")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    path = Path(args.csv) if args.csv else find_corpus(ROOT)
    if path is None or not path.is_file():
        print("no corpus: pass the path to silicon_dev.csv", file=sys.stderr)
        return 2
    validation = tailscope.validate_step_model(
        path, folds=args.folds, jobs=args.jobs, max_folds=1 if args.sim_only else args.max_folds,
        baseline=not args.no_old and not args.sim_only, progress=_fold_line,
    )  # fmt: skip
    rows = validation.rows
    result: dict[str, Any] = {"corpus": str(path), "folds": args.folds, "seconds": validation.seconds}
    if not args.sim_only:
        label = "leave-one-configuration-out" if args.folds == "loco" else f"{args.folds}-fold by configuration"
        if validation.folds_run < len({r.configuration for r in rows}) and args.max_folds is not None:
            label += f", first {validation.folds_run} fold(s) only"
        ttft, tpot = _column(rows, "predicted_ttft_ms"), _column(rows, "predicted_tpot_ms")
        result["trained"] = report(rows, ttft, tpot, f"trained step model, {label}")
        result["rows"] = [
            {"id": r.id, "ttft_ms": r.measured_ttft_ms, "tpot_ms": r.measured_tpot_ms,
             "pred_ttft_ms": r.predicted_ttft_ms, "pred_tpot_ms": r.predicted_tpot_ms}
            for r in rows
        ]  # fmt: skip
        result["repeatability"] = print_repeatability(path, rows)
        if not args.no_old:
            o_ttft, o_tpot = _column(rows, "baseline_ttft_ms"), _column(rows, "baseline_tpot_ms")
            result["old"] = report(
                rows, o_ttft, o_tpot, "previous model (roofline, built-in efficiencies; not refitted)"
            )
    if args.sim:
        lo, _, hi = args.sim_concurrency.partition("-")
        modes = ("agg", "disagg") if args.sim_mode == "both" else (args.sim_mode,)
        for mode, noise in ((m, x) for m in modes for x in {"on": (True,), "off": (False,), "both": (False, True)}[
                args.sim_desync]):  # fmt: skip
            sims = simulate_rows(rows, args.sim, lo=int(lo), hi=int(hi or lo), noise=noise, mode=mode)
            print(
                f"\n## end to end (tailscope sim) vs the analytic closed loop, {mode} rows, committed coefficients, "
                f"closed-loop noise {'on' if noise else 'off'}\n"
            )
            for s in sims:
                print(
                    f"{s['id'][:58]:58s} measured {s['measured_ttft_ms']:8.1f} / {s['measured_tpot_ms']:6.2f} ms  "
                    f"analytic {s['analytic_ttft_ms']:8.1f} / {s['analytic_tpot_ms']:6.2f}  "
                    f"sim {s['sim_ttft_ms']:8.1f} / {s['sim_tpot_ms']:6.2f}  ({s['sim_wall_s']:.1f} s)"
                )
            print_sim_errors(sims)
            result["sim_vs_analytic" + ("_disagg" if mode == "disagg" else "") + ("" if noise else "_no_desync")] = sims
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
