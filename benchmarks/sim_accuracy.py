"""Accuracy of the step model where nothing was fitted: leave-one-configuration-out on the corpus (prints; never fails).

A configuration is model × GPU × engine × precision × mode (85 in ``shared/calibration/silicon_dev.csv``). For each
one, the coefficients are refitted on every other configuration — without the held-out rows and without the copies of
their measurements that the export repeats under other names — and the held-out rows are predicted with the
steady-state closed loop (:mod:`tailscope.engine.closed_loop`). Printed: TTFT and TPOT MAPE per configuration, per
engine and overall, aggregated and disaggregated rows separately; the model before this one (the plain roofline with
its built-in efficiencies, fitted on 15 points of one configuration) in the same harness; and, with ``--sim N``,
N aggregated rows simulated end to end (``tailscope sim``'s code path, the committed coefficients) next to the
analytic figure for the same rows.

    python benchmarks/sim_accuracy.py [CORPUS_CSV] [--jobs 2] [--folds loco|K] [--sim 12] [--json OUT]
        [--sim-only] [--sim-concurrency 64-256] [--sim-desync on|off|both] [--sim-loco]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tailscope.engine.closed_loop import aggregated, coefficient_step
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.fit import KV_MEMORY_UTILIZATION, Dataset, Observation, fit, predict
from tailscope.engine.perf import StepTimeModel
from tailscope.io.corpus import CorpusRow, duplicate_groups, load_corpus, observations

ROOT = Path(__file__).resolve().parents[1]


def find_corpus() -> Path | None:
    for parent in ROOT.parents:
        cand = parent / "shared" / "calibration" / "silicon_dev.csv"
        if cand.is_file():
            return cand
    return None


# ---- cross-validation -----------------------------------------------------------------------------------------
_STATE: dict[str, Any] = {}


def _init(path: str) -> None:
    rows = load_corpus(path)
    _STATE["rows"] = rows
    _STATE["obs"] = observations(rows)
    _STATE["dups"] = list(duplicate_groups(rows).values())


def _fold(held: list[int]) -> tuple[list[int], list[float], list[float], float]:
    """Fit without ``held`` (and every copy of its measurements), predict ``held``."""
    obs: list[Observation] = _STATE["obs"]
    held_set = set(held)
    train: list[int] = []
    for group in _STATE["dups"]:
        if held_set.intersection(group):
            continue
        train.append(group[0])
    t0 = time.perf_counter()
    res = fit(Dataset([obs[i] for i in train]))
    test = Dataset([obs[i] for i in held])
    ttft, tpot = predict(test, res.params.design(test), res.theta)
    return held, list(map(float, ttft)), list(map(float, tpot)), time.perf_counter() - t0


def cross_validate(path: Path, folds: str, jobs: int) -> tuple[list[CorpusRow], np.ndarray, np.ndarray]:
    _init(str(path))
    rows: list[CorpusRow] = _STATE["rows"]
    by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_key[r.config_key].append(i)
    groups = list(by_key.values())
    if folds != "loco":  # K folds of whole configurations (faster; for development)
        k = int(folds)
        merged: list[list[int]] = [[] for _ in range(k)]
        for j, g in enumerate(sorted(groups, key=len, reverse=True)):
            merged[j % k].extend(g)
        groups = merged
    ttft = np.full(len(rows), np.nan)
    tpot = np.full(len(rows), np.nan)
    done = 0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(str(path),)) as pool:
        for held, a, b, secs in pool.map(_fold, groups):
            ttft[held], tpot[held] = a, b
            done += 1
            print(
                f"fold {done}/{len(groups)}: {len(held)} rows, fit {secs:.0f} s ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
            )
    return rows, ttft, tpot


# ---- the model before this one ------------------------------------------------------------------------------------
def old_model(rows: list[CorpusRow], obs: list[Observation]) -> tuple[np.ndarray, np.ndarray]:
    """The plain roofline (:class:`StepTimeModel`, built-in efficiencies) in the same closed loop; aggregated rows
    only (it has no disaggregation), a worker's GPUs as tensor parallelism (it has no expert or attention DP)."""
    ttft = np.full(len(rows), np.nan)
    tpot = np.full(len(rows), np.nan)
    for i, (r, o) in enumerate(zip(rows, obs, strict=True)):
        if r.agg is None:
            continue
        m = StepTimeModel(o.model, o.gpu, tp=r.agg.gpus, weights_dtype=r.precision, kv_dtype=r.kv_dtype)

        def step(n: Any, ctx: Any, chunk: Any, done: Any, logits: Any, m: StepTimeModel = m) -> Any:
            out = np.empty(np.shape(n))
            for j in range(out.size):
                pre = [(int(chunk[j]), int(done[j]))] if chunk[j] > 0 else []
                out[j] = m.step_s(pre, float(n[j]), float(n[j] * ctx[j]), float(logits[j]))  # type: ignore[arg-type]
            return out

        _, budget = engine_profile("vllm").limits(o.gpu)
        eff = m.eff
        a, b = aggregated(
            step,
            np.array([float(r.isl)]),
            np.array([float(r.osl)]),
            np.array([float(r.concurrency)]),
            np.array([float(budget)]),
            np.array([eff.frontend_ms / 1e3]),
            np.array([eff.frontend_per_inflight_us / 1e6]),
        )
        ttft[i], tpot[i] = a[0], b[0]
    return ttft, tpot


# ---- end to end against the analytic figure -----------------------------------------------------------------------
def pick_rows(rows: list[CorpusRow], n: int, lo: int = 1, hi: int = 256) -> list[int]:
    """``n`` aggregated rows with ``lo`` ≤ concurrency ≤ ``hi``, spread over the configurations (deterministic)."""
    by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r.agg is not None and lo <= r.concurrency <= hi:
            by_key[r.config_key].append(i)
    keys = sorted(by_key)
    picks = [by_key[keys[(j * 7) % len(keys)]][(j * 5) % len(by_key[keys[(j * 7) % len(keys)]])] for j in range(n)]
    return list(dict.fromkeys(picks))


#: the held-out fits of ``--sim-loco`` by configuration (one fit serves both ``--sim-desync`` passes)
_FITS: dict[tuple[str, ...], Any] = {}


def simulate_rows(
    rows: list[CorpusRow],
    obs: list[Observation],
    n: int,
    *,
    lo: int = 1,
    hi: int = 256,
    desync: bool = True,
    loco: bool = False,
) -> list[dict[str, Any]]:
    """``n`` aggregated rows (spread over the configurations, ``lo`` ≤ concurrency ≤ ``hi``) through the simulator
    and the closed loop. ``desync``: the simulator's closed-loop noise on (the default) or off. ``loco``: with
    coefficients fitted without the row's configuration (as the cross-validation) instead of the committed ones."""
    from tailscope.engine import step_model as sm
    from tailscope.engine.cluster import ClusterSpec
    from tailscope.engine.step_model import TrainedStepModel
    from tailscope.sim.run import SimArgs, build_cluster, run_sim

    learned = sm.learned_efficiencies
    fits = _FITS
    out: list[dict[str, Any]] = []
    for i in pick_rows(rows, n, lo, hi):
        r = rows[i]
        p = r.agg
        assert p is not None
        if loco:  # the row's configuration held out, as a LOCO fold does (the sim resolves coefficients here)
            if r.config_key not in fits:
                if not _STATE:
                    _init(str(find_corpus()))
                held = [j for j, q in enumerate(rows) if q.config_key == r.config_key]
                train = [g[0] for g in _STATE["dups"] if not set(held).intersection(g)]
                fits[r.config_key] = fit(Dataset([_STATE["obs"][j] for j in train]))
            sm.learned_efficiencies = fits[r.config_key].efficiencies  # type: ignore[assignment]
        else:
            sm.learned_efficiencies = learned
        args = SimArgs(
            model=r.model,
            gpu=r.system,
            tp=p.tp,
            replicas=p.workers,
            backend=r.engine,
            ep=p.ep,
            attention_dp=p.attention_dp,
            weights_dtype=r.precision,
            kv_dtype=r.kv_dtype,
            concurrency=r.concurrency,
            requests=r.concurrency * 10,
            warmup=r.concurrency * 2,
            input_tokens=str(r.isl),
            output_tokens=str(r.osl),
            store=False,
            desync=desync,
        )
        cluster: ClusterSpec = build_cluster(args)
        m = cluster.perf()
        assert isinstance(m, TrainedStepModel)
        ranks = p.workers * p.attention_dp

        t1, tau = aggregated(
            coefficient_step(m.coeffs),
            np.array([float(r.isl)]),
            np.array([float(r.osl)]),
            np.array([r.concurrency / ranks]),
            np.array([float(cluster.engine_config().max_num_batched_tokens)]),
            np.array([m.efficiency.frontend_ms / 1e3]),
            np.array([m.efficiency.inflight_us / 1e6]),
            np.array([m.efficiency.burst]),
            np.array([m.kv_capacity_tokens(KV_MEMORY_UTILIZATION) / (r.isl + r.osl / 2.0)]),
        )
        t0 = time.perf_counter()
        s = run_sim(args).summary
        wall = time.perf_counter() - t0
        out.append(
            {
                "id": r.id,
                "flags": " ".join(r.sim_flags()),
                "measured_ttft_ms": r.ttft_ms,
                "measured_tpot_ms": r.tpot_ms,
                "analytic_ttft_ms": float(t1[0]) * 1e3,
                "analytic_tpot_ms": float(tau[0]) * 1e3,
                "sim_ttft_ms": s["ttft_ms"]["mean"],
                "sim_tpot_ms": s["tpot_ms"]["mean"],
                "sim_wall_s": wall,
                "concurrency": r.concurrency,
            }
        )
    sm.learned_efficiencies = learned
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


#: where the error is: by GPU, model family, concurrency band and engine (printed per mode)
_BREAKDOWNS: tuple[tuple[str, Any], ...] = (
    ("gpu", lambda r: r.system),
    ("family", lambda r: _family(r.model)),
    ("load", lambda r: _band(r.concurrency)),
)


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred)
    return float(np.mean(np.abs(pred[ok] / meas[ok] - 1))) if ok.any() else float("nan")


def report(rows: list[CorpusRow], ttft: np.ndarray, tpot: np.ndarray, title: str) -> dict[str, Any]:
    m_ttft = np.array([r.ttft_ms / 1e3 for r in rows])
    m_tpot = np.array([r.tpot_ms / 1e3 for r in rows])
    out: dict[str, Any] = {"title": title, "modes": {}, "configs": []}
    print(f"\n## {title}\n")
    for mode in ("agg", "disagg"):
        idx = np.array([i for i, r in enumerate(rows) if r.mode == mode and np.isfinite(ttft[i])])
        if idx.size == 0:
            continue
        by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i in idx:
            by_key[rows[i].config_key].append(int(i))
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
                groups[keyf(rows[i])].append(int(i))
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
    ap.add_argument("--sim", type=int, default=0, help="also simulate N aggregated rows end to end")
    ap.add_argument("--sim-concurrency", default="1-256", help="LO-HI: the clients of the rows --sim picks")
    ap.add_argument("--sim-desync", choices=("on", "off", "both"), default="on", help="closed-loop noise in --sim")
    ap.add_argument("--sim-loco", action="store_true", help="--sim with each row's configuration held out")
    ap.add_argument("--sim-only", action="store_true", help="--sim without the cross-validation")
    ap.add_argument("--no-old", action="store_true", help="skip the previous model")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    path = Path(args.csv) if args.csv else find_corpus()
    if path is None or not path.is_file():
        print("no corpus: pass the path to silicon_dev.csv", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    result: dict[str, Any] = {"corpus": str(path), "folds": args.folds}
    if args.sim_only:
        rows = load_corpus(path)
    else:
        rows, ttft, tpot = cross_validate(path, args.folds, args.jobs)
        result["seconds"] = time.perf_counter() - t0
        label = "leave-one-configuration-out" if args.folds == "loco" else f"{args.folds}-fold by configuration"
        result["trained"] = report(rows, ttft, tpot, f"trained step model, {label}")
        result["rows"] = [
            {"id": r.id, "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "pred_ttft_ms": a * 1e3, "pred_tpot_ms": b * 1e3}
            for r, a, b in zip(rows, ttft.tolist(), tpot.tolist(), strict=True)
        ]
    obs = observations(rows)
    if not args.no_old and not args.sim_only:
        o_ttft, o_tpot = old_model(rows, obs)
        result["old"] = report(rows, o_ttft, o_tpot, "previous model (roofline, built-in efficiencies; not refitted)")
    if args.sim:
        lo, _, hi = args.sim_concurrency.partition("-")
        coeffs = "coefficients fitted without the row's configuration" if args.sim_loco else "committed coefficients"
        for desync in {"on": (True,), "off": (False,), "both": (False, True)}[args.sim_desync]:
            sims = simulate_rows(rows, obs, args.sim, lo=int(lo), hi=int(hi or lo), desync=desync, loco=args.sim_loco)
            noise = "closed-loop noise " + ("on" if desync else "off")
            print(f"\n## end to end (tailscope sim) vs the analytic closed loop, {coeffs}, {noise}\n")
            for s in sims:
                print(
                    f"{s['id'][:58]:58s} measured {s['measured_ttft_ms']:8.1f} / {s['measured_tpot_ms']:6.2f} ms  "
                    f"analytic {s['analytic_ttft_ms']:8.1f} / {s['analytic_tpot_ms']:6.2f}  "
                    f"sim {s['sim_ttft_ms']:8.1f} / {s['sim_tpot_ms']:6.2f}  ({s['sim_wall_s']:.1f} s)"
                )
            print_sim_errors(sims)
            result["sim_vs_analytic" + ("" if desync else "_no_desync")] = sims
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
