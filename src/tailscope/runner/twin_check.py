"""Predict with a digital twin (with a prediction interval), measure with bench, and compare.

The prediction is three simulations of the same request stream: the fitted twin, and the twin with every cost
moved one standard error down and up; the interval is the range those give. The measurement is a bench run of the
same stream (same seed) against the real server.

An *anchor* (``twin check --anchor``) re-reads the server's current speed with two small fixed runs measured right
before and right after the workload: a closed loop (2 streams × 64-token prompts × 64 tokens) for the decode path and
a few requests sent one at a time at three prompt lengths for the prefill path. The calibration ran the same two
runs in every round; the twin's decode-path costs are scaled by TPOT now ÷ TPOT then and its prefill path (front end
and prefill costs) by TTFT now ÷ TTFT then before predicting. It corrects what the twin cannot know — that the server
is faster or slower today than when it was calibrated — without looking at the workload being predicted.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tailscope.engine.twin import TwinModel
from tailscope.engine.twin_observe import steady_decode_gaps
from tailscope.errors import ConfigError
from tailscope.io.calibration import load_calibration
from tailscope.records import RequestRecord
from tailscope.sim.run import SimArgs, SimOutcome, run_sim
from tailscope.store.runs import RunStore
from tailscope.workload.spec import RequestSpec

#: the anchor stream: closed loop, (concurrency, requests, prompt tokens, output tokens)
ANCHOR = (2, 12, 64, 64)
#: the anchor's lone requests (one at a time): (prompt lengths, requests per length, output tokens); preceded by one
#: request that opens the connection and is not counted (its TTFT pays for the TCP handshake)
LONE_ANCHOR = ((64, 256, 768), 4, 16)

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


def predict(args: SimArgs, *, store: RunStore | None = None, on_progress: Any = None) -> Prediction:
    """Simulate ``args`` with its twin calibration at −1σ, fit and +1σ (the fit is stored in ``store`` when given,
    else as ``args`` says).

    Raises:
        ConfigError: when ``args.calibration`` is not a twin file.
    """
    cal = load_calibration(args.calibration)
    if cal.twin is None:
        raise ConfigError(f"--calibration {args.calibration}: not a twin file (make one with `tailscope calibrate`)")
    fit = run_sim(args, store=store, on_progress=on_progress)
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
        stagger=0.0,  # as the anchor's bench starts them
        store=False,
    )
    summary = run_sim(args).summary
    return float(summary["ttft_ms"]["p50"]), float(summary["tpot_ms"]["p50"])


#: the costs the anchor's decode factor rescales (the decode path); the prefill factor rescales the prefill costs
#: and the front end. Rescaling the front end and prefill by the *stream's* TTFT was tried first and made TTFT worse
#: (p90 error −19 % → −34 % on vLLM CPU): twelve short requests in a closed loop say little about admission. Lone
#: requests at fixed prompt lengths, the same kind of measurement as the probe's prefill ladder, do.
DECODE_COSTS = ("step_overhead_us", "per_seq_us", "per_kv_token_us")
PREFILL_COSTS = ("prefill_per_token_us", "prefill_attn_us")


def lone_anchor_specs(seed: int, run: int, max_prompt: int | None = None) -> list[RequestSpec]:
    """The anchor's lone requests, the connection opener first; lengths capped at ``max_prompt``.

    The lengths are the same for every check and calibration round; the text differs per ``run`` (a prompt starts
    with its seed), so a server with prefix caching never answers an anchor from its cache.
    """
    lengths, per, out = LONE_ANCHOR
    cap = max_prompt or max(lengths)
    order = [lengths[0]] + [min(p, cap) for _ in range(per) for p in lengths]
    base = 0x5EED_0000 + (seed * 1_000 + run) * 64
    return [RequestSpec(id=i, input_tokens=p, output_tokens=out, seed=base + i) for i, p in enumerate(order)]


def lone_ttfts(records: list[RequestRecord], specs: list[RequestSpec]) -> dict[int, list[float]]:
    """{requested prompt length: TTFTs from send (ms)} of a lone-anchor run, without the connection opener."""
    by_id = {s.id: s for s in specs}
    out: dict[int, list[float]] = {}
    for r in records:
        if r.id == 0 or not r.ok or r.sent_ns is None or r.first_token_ns is None or r.id not in by_id:
            continue
        out.setdefault(int(by_id[r.id].input_tokens or 0), []).append((r.first_token_ns - r.sent_ns) / 1e6)
    return out


def merge_ttfts(runs: list[dict[int, list[float]]]) -> dict[int, float]:
    """The median TTFT per prompt length over several lone-anchor runs."""
    pooled: dict[int, list[float]] = {}
    for run in runs:
        for length, values in run.items():
            pooled.setdefault(length, []).extend(values)
    return {length: _median(sorted(v)) for length, v in sorted(pooled.items()) if v}


def prefill_factor(now: dict[int, float], then: dict[int, float]) -> float | None:
    """TTFT now ÷ then: the geometric mean over the prompt lengths both have (None when they share none)."""
    ratios = [now[k] / then[k] for k in now if k in then and now[k] > 0 and then[k] > 0]
    if not ratios:
        return None
    return float(math.exp(sum(math.log(r) for r in ratios) / len(ratios)))


def scaled(twin: TwinModel, decode_factor: float, prefill: float = 1.0) -> TwinModel:
    """The twin with its decode-path costs multiplied by ``decode_factor`` and its prefill path by ``prefill`` (the
    server's speed now relative to the calibration), with their standard errors.

    A lone request's TTFT is ``frontend + overhead + per_seq + prefill(P)``; overhead and per_seq belong to the
    decode path, so the front end absorbs the difference: TTFT alone scales by exactly ``prefill``. (A vLLM CPU
    server that had aged ten minutes decoded 1.4–1.6× slower while its TTFT hardly moved: scaling the step overhead
    without this put the decode slowdown into every predicted TTFT.)
    """
    c, s = twin.coefficients, twin.stderr
    fixed = c.step_overhead_us + c.per_seq_us
    frontend = max(0.0, prefill * (c.frontend_us + fixed) - decode_factor * fixed)
    coefficients = replace(
        c,
        **{name: getattr(c, name) * decode_factor for name in DECODE_COSTS},
        **{name: getattr(c, name) * prefill for name in PREFILL_COSTS},
        frontend_us=frontend,
        frontend_busy_us=c.frontend_busy_us * prefill,
    )
    stderr = replace(
        s,
        **{name: getattr(s, name) * decode_factor for name in DECODE_COSTS},
        **{name: getattr(s, name) * prefill for name in (*PREFILL_COSTS, "frontend_us", "frontend_busy_us")},
    )
    fitted_on = {**twin.fitted_on, "anchor_decode_factor": decode_factor, "anchor_prefill_factor": prefill}
    return replace(twin, coefficients=coefficients, stderr=stderr, fitted_on=fitted_on)


@dataclass(frozen=True, slots=True)
class Anchored:
    """The rescaled twin file and the factors it was scaled by."""

    path: Path
    decode: float
    prefill: float | None  # None: the twin has no lone-request reference (prefill path left as calibrated)


def anchored_calibration(
    calibration: Path, measured_tpot_ms: list[float], out_dir: Path, lone_ttft_ms: dict[int, float] | None = None
) -> Anchored:
    """Write the twin rescaled to the anchors.

    The decode factor is the anchors' median TPOT ÷ the same stream's TPOT measured during calibration
    (``fitted_on.anchor_tpot_ms``; the twin's simulation of it when the twin has none); the prefill factor is the
    lone requests' TTFT now ÷ then per prompt length (``fitted_on.anchor_lone_ttft_ms``), geometric mean. Comparing
    the server with itself, not with the model, keeps the model's own error on the anchor runs out of the factors
    (measured: the twin under-predicted the anchor stream by 16–57 % right after calibrating, which a simulated
    reference mistook for drift).

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
    decode = _median(sorted(good)) / float(reference)
    then = _lone_reference(cal.twin.fitted_on.get("anchor_lone_ttft_ms"))
    prefill = prefill_factor(lone_ttft_ms or {}, then) if then else None
    path = out_dir / "twin-anchored.yaml"
    twin = scaled(cal.twin, decode, prefill if prefill is not None else 1.0)
    path.write_text(yaml.safe_dump(twin.to_mapping(), sort_keys=False), encoding="utf-8")
    return Anchored(path, decode, prefill)


def _lone_reference(raw: Any) -> dict[int, float]:
    if not isinstance(raw, dict):
        return {}
    out: dict[int, float] = {}
    for k, v in raw.items():
        try:
            out[int(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def fresh_prompts(specs: Iterable[RequestSpec], repeat: int) -> Iterator[RequestSpec]:
    """The same request stream for measurement ``repeat`` (0-based) with new prompt text: lengths, arrival times,
    classes, sessions and shared prefixes unchanged, every request's own text different.

    A repeat that re-sent the same prompts would be answered partly from the server's prefix cache: on vLLM CPU,
    requests of the second and third of three identical runs that arrived at an idle server had median TTFTs 24 %
    lower than the first run's for short prompts (21.2 → 16.1 and 16.0 ms) and 10–17 % lower for longer ones.
    """
    for s in specs:
        yield s if repeat == 0 else replace(s, seed=s.seed + repeat * 1_000_000_007)


#: steady gaps a batch size needs on both sides to enter the ratio of :func:`steady_decode_report`
MIN_STEADY_GAPS = 20


def steady_decode_report(
    measured: Sequence[Sequence[RequestRecord]], predicted: Sequence[RequestRecord]
) -> dict[str, Any]:
    """The server's steady decode against the twin's at equal batch (:func:`~tailscope.engine.twin_observe.
    steady_decode_gaps`): per stream count the mean gap measured (over the repeats) and predicted, and ``ratio``,
    the geometric mean of measured ÷ predicted over the batch sizes with ≥ :data:`MIN_STEADY_GAPS` gaps on both
    sides, weighted by the fewer (None without one). Near 1 with a TPOT miss: the twin's step costs held and the
    miss is in how it batches, stalls or spreads; far from 1: the server ran at another speed than the (anchored)
    twin — drift the anchor missed, or a fit that is off.
    """
    m, p = steady_decode_gaps(measured), steady_decode_gaps([predicted])
    rows: dict[str, dict[str, float | int | None]] = {}
    logs = weights = 0.0
    for k in sorted(set(m) | set(p)):
        mm, mn = m.get(k, (None, 0))
        pm, pn = p.get(k, (None, 0))
        rows[str(k)] = {"measured_ms": mm, "predicted_ms": pm, "measured_gaps": mn, "predicted_gaps": pn}
        if mm and pm and min(mn, pn) >= MIN_STEADY_GAPS:
            w = float(min(mn, pn))
            logs += w * math.log(mm / pm)
            weights += w
    return {"ratio": math.exp(logs / weights) if weights else None, "by_streams": rows}


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
    """The median of ``values``, which must be sorted."""
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
