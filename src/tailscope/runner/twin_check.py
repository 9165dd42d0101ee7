"""Predict with a digital twin (with a prediction interval), measure with bench, and compare.

The prediction is three simulations of the same request stream: the fitted twin, and the twin with every cost
moved one standard error down and up; the interval is the range those give. The measurement is a bench run of the
same stream (same seed) against the real server.

An *anchor* (``twin check --anchor``) re-reads the server's current speed: a small fixed closed loop (2 streams ×
64-token prompts × 64 tokens) measured right before and right after the workload and simulated with the twin; the
twin's decode-path costs are scaled by measured ÷ simulated TPOT (the mean over the anchors) before predicting. It
corrects what the twin cannot know — that the server decodes faster or slower today than when it was calibrated —
without looking at the workload being predicted.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tailscope.engine.calibration import load_calibration
from tailscope.engine.twin import TwinCoefficients, TwinModel
from tailscope.errors import ConfigError
from tailscope.sim.run import SimArgs, SimOutcome, run_sim
from tailscope.workload.spec import RequestSpec

#: the anchor stream: closed loop, (concurrency, requests, prompt tokens, output tokens)
ANCHOR = (2, 12, 64, 64)

#: the metrics compared, as (summary key, percentile)
COMPARED: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "p50"),
    ("ttft_ms", "p90"),
    ("ttft_ms", "p99"),
    ("tpot_ms", "p50"),
    ("tpot_ms", "p90"),
    ("tpot_ms", "p99"),
    ("e2e_ms", "p50"),
    ("e2e_ms", "p90"),
    ("e2e_ms", "p99"),
)
#: the rows the tolerance applies to (p99 is reported, but CPU timing noise makes it a poor pass/fail signal)
GATED = {("ttft_ms", "p50"), ("ttft_ms", "p90"), ("tpot_ms", "p50"), ("tpot_ms", "p90")}


@dataclass(frozen=True, slots=True)
class Prediction:
    """The twin's prediction and its interval (summaries of the three simulations)."""

    outcome: SimOutcome
    low: dict[str, Any]
    high: dict[str, Any]


def predict(args: SimArgs) -> Prediction:
    """Simulate ``args`` with its twin calibration at −1σ, fit and +1σ.

    Raises:
        ConfigError: when ``args.calibration`` is not a twin file.
    """
    cal = load_calibration(args.calibration)
    if cal.twin is None:
        raise ConfigError(f"--calibration {args.calibration}: not a twin file (make one with `tailscope calibrate`)")
    fit = run_sim(args)
    bounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sigma in (-1.0, 1.0):
            path = Path(tmp) / f"twin{sigma:+}.yaml"
            path.write_text(yaml.safe_dump(cal.twin.shifted(sigma).to_mapping(), sort_keys=False))
            bounds.append(run_sim(replace(args, calibration=path, store=False)).summary)
    return Prediction(fit, bounds[0], bounds[1])


def interval_of(pred: Prediction) -> dict[str, dict[str, tuple[float, float]]]:
    """{metric: {percentile: (low, high)}} over the three simulations, for TTFT/TPOT/E2E p50/p90/p99."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for key, pct in COMPARED:
        values = [v for v in (_get(s, key, pct) for s in (pred.outcome.summary, pred.low, pred.high)) if v is not None]
        if values:
            out.setdefault(key, {})[pct] = (min(values), max(values))
    return out


def _get(summary: dict[str, Any], key: str, pct: str) -> float | None:
    v = (summary.get(key) or {}).get(pct)
    return float(v) if v is not None else None


def compare(pred: Prediction, measured: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """Side-by-side rows {metric, percentile, predicted, low, high, measured, error, within} and the verdict."""
    rows = []
    for key, pct in COMPARED:
        p = _get(pred.outcome.summary, key, pct)
        m = _get(measured, key, pct)
        lo, hi = _get(pred.low, key, pct), _get(pred.high, key, pct)
        err = (p - m) / m if p is not None and m else None
        rows.append(
            {
                "metric": key,
                "percentile": pct,
                "predicted": p,
                "low": min(x for x in (lo, hi, p) if x is not None) if p is not None else None,
                "high": max(x for x in (lo, hi, p) if x is not None) if p is not None else None,
                "measured": m,
                "error": err,
                "gated": (key, pct) in GATED,
                "within": err is not None and abs(err) <= tolerance,
            }
        )
    tp_p, tp_m = pred.outcome.summary.get("output_tokens_per_s"), measured.get("output_tokens_per_s")
    rows.append(
        {
            "metric": "output_tokens_per_s",
            "percentile": "",
            "predicted": tp_p,
            "low": None,
            "high": None,
            "measured": tp_m,
            "error": (tp_p - tp_m) / tp_m if tp_p is not None and tp_m else None,
            "gated": False,
            "within": True,
        }
    )
    failed = [r for r in rows if r["gated"] and not r["within"]]
    return {
        "tolerance": tolerance,
        "rows": rows,
        "passed": not failed,
        "failed": [f"{r['metric']}.{r['percentile']}" for r in failed],
    }


def anchor_specs(seed: int) -> list[RequestSpec]:
    """The anchor's requests (the same for every check, so anchors are comparable)."""
    _, n, prompt, out = ANCHOR
    return [RequestSpec(id=i, input_tokens=prompt, output_tokens=out, seed=seed * 7_919 + i) for i in range(n)]


def predicted_anchor_ms(calibration: Path) -> tuple[float, float]:
    """The anchor stream's (TTFT p50, TPOT p50) in ms, simulated with the twin in ``calibration``."""
    conc, n, prompt, out = ANCHOR
    args = SimArgs(
        calibration=calibration,
        concurrency=conc,
        requests=n,
        input_tokens=str(prompt),
        output_tokens=str(out),
        store=False,
    )
    summary = run_sim(args).summary
    return float(summary["ttft_ms"]["p50"]), float(summary["tpot_ms"]["p50"])


#: the costs an anchor rescales: the decode path. Front-end and prefill costs are left as calibrated — rescaling
#: them by the anchor's TTFT was tried and made TTFT worse (p90 error −19 % → −34 % on vLLM CPU): 12 short requests
#: in a closed loop say little about the admission of a workload's mixed prompts.
DECODE_COSTS = ("step_overhead_us", "per_seq_us", "per_kv_token_us")


def scaled(twin: TwinModel, decode_factor: float) -> TwinModel:
    """The twin with its decode-path costs (and their standard errors) multiplied by ``decode_factor`` (the
    server's decode speed now, relative to the calibration)."""

    def mul(c: TwinCoefficients) -> TwinCoefficients:
        return replace(c, **{name: getattr(c, name) * decode_factor for name in DECODE_COSTS})

    fitted_on = {**twin.fitted_on, "anchor_decode_factor": decode_factor}
    return replace(twin, coefficients=mul(twin.coefficients), stderr=mul(twin.stderr), fitted_on=fitted_on)


def anchored_calibration(calibration: Path, measured_tpot_ms: list[float], out_dir: Path) -> tuple[Path, float]:
    """Write the twin rescaled to the anchors and return it with the decode factor: the anchors' mean TPOT ÷ the
    same stream's TPOT measured during calibration (``fitted_on.anchor_tpot_ms``; the twin's simulation of it when
    the twin has none). Comparing the server with itself, not with the model, keeps the model's own error on the
    anchor stream out of the factor (measured: the twin under-predicted the anchor by 16–57 % right after
    calibrating, which the simulated reference mistook for drift).

    Raises:
        ConfigError: when ``calibration`` is not a twin file or no anchor was measured.
    """
    cal = load_calibration(calibration)
    if cal.twin is None:
        raise ConfigError(f"--calibration {calibration}: not a twin file (make one with `tailscope calibrate`)")
    good = [m for m in measured_tpot_ms if m > 0]
    if not good:
        raise ConfigError("the anchor runs measured no TPOT (did every anchor request fail?); drop --anchor")
    reference = cal.twin.fitted_on.get("anchor_tpot_ms")
    if not isinstance(reference, int | float) or reference <= 0:
        reference = predicted_anchor_ms(calibration)[1]  # a twin fitted --from-runs has no measured reference
    decode = (sum(good) / len(good)) / float(reference)
    path = out_dir / "twin-anchored.yaml"
    path.write_text(yaml.safe_dump(scaled(cal.twin, decode).to_mapping(), sort_keys=False), encoding="utf-8")
    return path, decode


def median_summary(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-percentile median over repeated measurements of the same stream (the compared metrics and
    throughput): one run on a machine whose speed drifts is one draw; the median of several is the measurement."""
    out: dict[str, Any] = {}
    for key, pct in COMPARED:
        values = sorted(v for v in (_get(s, key, pct) for s in summaries) if v is not None)
        if values:
            out.setdefault(key, {})[pct] = _median(values)
    tps = sorted(float(s["output_tokens_per_s"]) for s in summaries if s.get("output_tokens_per_s") is not None)
    if tps:
        out["output_tokens_per_s"] = _median(tps)
    return out


def _median(values: list[float]) -> float:
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
