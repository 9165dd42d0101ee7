"""Evaluate a contract on a run: SLO checks, regression checks against a baseline, layer checks on a trace set.

Verdicts:

* ``pass`` / ``fail`` — SLO and layer checks compare the observed value with the limit; regression checks fail only
  when the whole confidence interval of the change lies beyond the limit and pass when it lies entirely within it.
* ``inconclusive`` — the interval straddles the limit; counts as a pass unless ``strict``.
* ``missing`` — the data for the check is not there (no samples in that class, no baseline, no trace set).

Exit code of a gate: 1 if any check fails (or is inconclusive under ``strict``), else 2 if any data is missing, else 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from tailscope.verify.bootstrap import DiffCI, bootstrap_rate_diff, bootstrap_stat_diff
from tailscope.verify.comparable import comparability
from tailscope.verify.contract import (
    LATENCY_METRICS,
    RESOURCE_METRICS,
    RESOURCE_UNITS,
    Contract,
    LayerCheck,
    Regression,
    RegressionLimit,
    SloCheck,
    percentile_label,
)
from tailscope.verify.diagnose import Diagnosis
from tailscope.verify.findings import Finding, build_view
from tailscope.verify.rules_client import client_bottleneck
from tailscope.verify.rundata import RunData
from tailscope.verify.values import (
    latency_groups,
    latency_samples,
    measured,
    rate_data,
    resource_value,
    stat_of,
    value_from_records,
    value_from_summary,
)


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: stable check name (``slo ttft_ms.p99``, ``regression tpot_ms.p95``, ``layer retrieval.p99.9``).
        kind: ``slo``, ``regression`` or ``layer``.
        observed: the run's value (for regressions: the change, relative when the limit is relative).
        limit: human-readable limit (``≤ 1500 ms``, ``≤ +10%``).
        unit: ``ms``, ``/s``, ``fraction`` or ``%`` (regression changes).
        detail: one line explaining the verdict (numbers included).
        ci: the bootstrap interval for regression checks.
        samples: number of samples behind ``observed``.
        line: the contract line that declared the check (0 when not from a file).
    """

    name: str
    kind: str
    verdict: Verdict
    observed: float | None
    limit: str
    unit: str
    detail: str
    ci: DiffCI | None = None
    samples: int = 0
    line: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "verdict": self.verdict.value,
            "observed": self.observed,
            "limit": self.limit,
            "unit": self.unit,
            "detail": self.detail,
            "ci": self.ci.to_dict() if self.ci else None,
            "samples": self.samples,
            "line": self.line,
        }


@dataclass(frozen=True, slots=True)
class GateResult:
    """All check results of one gate evaluation.

    Attributes:
        contract: the contract's name.
        run_id: the run under test.
        baseline_id: the baseline of the regression checks (None: none was found or needed).
        checks: one result per check, in the contract's order (SLOs, regressions, layers).
        strict: inconclusive regression checks fail the gate.
        notes: caveats about the data (an incomplete run, a client that fell behind, …).
        diagnosis: the run's findings when asked for and the gate did not pass (else None).
    """

    contract: str
    run_id: str
    baseline_id: str | None
    checks: tuple[CheckResult, ...]
    strict: bool = False
    notes: tuple[str, ...] = field(default=())
    diagnosis: Diagnosis | None = None

    def count(self, verdict: Verdict) -> int:
        """How many checks have this verdict."""
        return sum(1 for c in self.checks if c.verdict is verdict)

    @property
    def passed(self) -> bool:
        """True when the gate passes (exit code 0): no failure, no missing data (and no inconclusive when strict)."""
        return self.exit_code == 0

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The diagnosis's findings (empty unless a diagnosis was asked for and the gate did not pass)."""
        return self.diagnosis.findings if self.diagnosis is not None else ()

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail (inconclusive too when strict), 2 missing data."""
        if self.count(Verdict.FAIL) or (self.strict and self.count(Verdict.INCONCLUSIVE)):
            return 1
        if self.count(Verdict.MISSING) or not self.checks:
            return 2
        return 0

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` or ``missing data``."""
        return {0: "pass", 1: "fail", 2: "missing data"}[self.exit_code]

    def to_dict(self) -> dict[str, Any]:
        """The document ``tailscope gate --json`` writes (``findings`` only when there are some)."""
        return {
            "contract": self.contract,
            "run": self.run_id,
            "baseline": self.baseline_id,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "strict": self.strict,
            "checks": [c.to_dict() for c in self.checks],
            "notes": list(self.notes),
            **({"findings": [f.to_dict() for f in self.findings]} if self.findings else {}),
        }


def _unit(metric: str) -> str:
    if metric in LATENCY_METRICS:
        return "ms"
    if metric in RESOURCE_UNITS:
        return RESOURCE_UNITS[metric]
    return "fraction" if metric == "error_rate" else "/s"


def _fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "fraction":
        return f"{value:.4g}"
    if unit == "MiB":
        return f"{value / 1024:.2f} GiB" if value >= 1024 else f"{value:.0f} MiB"
    if unit in ("%", "J"):
        return f"{value:.3g} {unit}"
    return f"{value:.3g}{unit}"


def check_slo(run: RunData, slo: SloCheck, all_checks: Sequence[SloCheck] = ()) -> CheckResult:
    """One SLO check on a run (from its records, or its stored summary when it has no records)."""
    unit = _unit(slo.metric)
    parts = []
    if slo.max is not None:
        parts.append(f"≤ {_fmt(slo.max, unit)}")
    if slo.min is not None:
        parts.append(f"≥ {_fmt(slo.min, unit)}")
    limit = " and ".join(parts)
    name = f"slo {slo.name}"
    if slo.metric in RESOURCE_METRICS:
        observed, n = resource_value(slo.metric, run.samples, run.summary, run.records)
        if observed is None:
            src = "engine KV gauge" if slo.metric == "kv_usage_max" else "GPU telemetry (bench --telemetry-url)"
            return CheckResult(
                name, "slo", Verdict.MISSING, None, limit, unit, f"no {src} in run {run.id}", line=slo.line
            )
    elif run.records:
        observed, n = value_from_records(
            run.records, slo.metric, slo.percentile, request_class=slo.request_class, checks=all_checks
        )
    elif run.summary is not None:
        observed = value_from_summary(run.summary, slo.metric, slo.percentile, request_class=slo.request_class)
        n = 0
    else:
        observed, n = None, 0
    if observed is None:
        where = f" of class {slo.request_class!r}" if slo.request_class else ""
        return CheckResult(
            name, "slo", Verdict.MISSING, None, limit, unit, f"no samples{where} in run {run.id}", line=slo.line
        )
    ok = (slo.max is None or observed <= slo.max) and (slo.min is None or observed >= slo.min)
    verdict = Verdict.PASS if ok else Verdict.FAIL
    detail = f"observed {_fmt(observed, unit)}, limit {limit}" + (
        f" ({n} {'scrapes' if slo.metric in RESOURCE_METRICS else 'samples'})" if n else ""
    )
    return CheckResult(name, "slo", verdict, observed, limit, unit, detail, samples=n, line=slo.line)


def _regression_verdict(lim: RegressionLimit, low: float, high: float) -> Verdict:
    """Fail when the whole interval is worse than the limit, pass when it is wholly within it."""
    if lim.higher_is_better:
        floor = -abs(lim.limit)
        if high < floor:
            return Verdict.FAIL
        return Verdict.PASS if low >= floor else Verdict.INCONCLUSIVE
    if low > lim.limit:
        return Verdict.FAIL
    return Verdict.PASS if high <= lim.limit else Verdict.INCONCLUSIVE


def check_regression(
    run: RunData,
    baseline: RunData,
    lim: RegressionLimit,
    reg: Regression,
    rng: np.random.Generator,
    slos: Sequence[SloCheck] = (),
) -> CheckResult:
    """One regression check: bootstrap CI of the change of ``lim``'s statistic from ``baseline`` to ``run``.

    ``slos`` are the contract's SLOs (their latency limits define ``goodput_rps``).
    """
    name = f"regression {lim.key}"
    limit = f"{'≥' if lim.higher_is_better else '≤'} {lim.describe()}"
    unit = "%" if lim.relative else _unit(lim.metric)

    def missing(why: str, ci: DiffCI | None = None) -> CheckResult:
        return CheckResult(name, "regression", Verdict.MISSING, None, limit, unit, why, ci=ci, line=lim.line)

    if not run.records or not baseline.records:
        return missing(f"run {run.id if not run.records else baseline.id} has no request records to resample")
    cand = measured(run.records)
    base = measured(baseline.records)
    try:
        if lim.metric in LATENCY_METRICS:
            b = latency_samples(base, lim.metric)
            c = latency_samples(cand, lim.metric)
            n = int(min(b.size, c.size))
            if n < 2:
                raise ValueError
            ci = bootstrap_stat_diff(
                b,
                c,
                lim.percentile or "p99",
                confidence=reg.confidence,
                resamples=reg.resamples,
                rng=rng,
                baseline_groups=latency_groups(base, lim.metric),
                candidate_groups=latency_groups(cand, lim.metric),
            )
        else:
            rb, rc = rate_data(base, lim.metric, slos), rate_data(cand, lim.metric, slos)
            n = int(min(rb.values.size, rc.values.size))
            if n < 2:
                raise ValueError
            ci = bootstrap_rate_diff(
                rb.values,
                rb.scale,
                rc.values,
                rc.scale,
                confidence=reg.confidence,
                resamples=reg.resamples,
                rng=rng,
                poisson=rb.poisson,
            )
    except ValueError:
        return missing(f"not enough samples of {lim.key} in {run.id} or {baseline.id}")
    if lim.relative:
        if ci.rel is None or ci.rel_low is None or ci.rel_high is None:
            return missing(f"baseline {lim.key} is 0; use an absolute limit", ci)
        obs, low, high = ci.rel, ci.rel_low, ci.rel_high
        shown = f"{obs * 100:+.1f}% [{low * 100:+.1f}%, {high * 100:+.1f}%]"
    else:
        obs, low, high = ci.diff, ci.diff_low, ci.diff_high
        shown = f"{obs:+.4g} [{low:+.4g}, {high:+.4g}]"
    verdict = _regression_verdict(lim, low, high)
    pct = f"{ci.confidence * 100:g}%"
    detail = (
        f"{lim.key}: baseline {ci.baseline:.4g} → {ci.candidate:.4g}, change {shown} ({pct} CI, "
        f"{reg.resamples} resamples), limit {lim.describe()}"
    )
    if verdict is Verdict.INCONCLUSIVE:
        detail += "; the interval straddles the limit — more requests would decide"
    return CheckResult(name, "regression", verdict, obs, limit, unit, detail, ci=ci, samples=n, line=lim.line)


def check_layer(layer_samples: Mapping[str, Sequence[float] | np.ndarray] | None, check: LayerCheck) -> CheckResult:
    """One dependency contract: the layer's span durations (ms) at the percentile must be ≤ ``max_ms``."""
    limit = f"≤ {check.max_ms:g} ms"
    name = check.name
    if layer_samples is None:
        return CheckResult(
            name, "layer", Verdict.MISSING, None, limit, "ms", "no trace set given; pass --traces SET", line=check.line
        )
    samples = np.asarray(layer_samples.get(check.layer, ()), dtype=np.float64)
    observed = stat_of(samples, check.percentile)
    if observed is None:
        known = ", ".join(sorted(layer_samples)) or "none"
        return CheckResult(
            name,
            "layer",
            Verdict.MISSING,
            None,
            limit,
            "ms",
            f"no trace spends time in layer {check.layer!r} (layers seen: {known})",
            line=check.line,
        )
    verdict = Verdict.PASS if observed <= check.max_ms else Verdict.FAIL
    detail = f"{check.layer} {percentile_label(check.percentile)} {observed:.1f} ms over {samples.size} traces, {limit}"
    return CheckResult(
        name, "layer", verdict, observed, limit, "ms", detail, samples=int(samples.size), line=check.line
    )


def evaluate(
    contract: Contract,
    run: RunData,
    *,
    baseline: RunData | None = None,
    baseline_missing: str | None = None,
    layer_samples: Mapping[str, Sequence[float] | np.ndarray] | None = None,
    strict: bool = False,
    rng: np.random.Generator | None = None,
) -> GateResult:
    """Evaluate every check of ``contract`` on ``run``.

    Args:
        contract: the validated contract.
        run: the run under test.
        baseline: the baseline run for regression checks (``None``: those checks report missing data).
        baseline_missing: why there is no baseline (shown in those checks), e.g. the lookup error.
        layer_samples: span durations (ms) per layer from a trace set, for layer checks.
        strict: inconclusive regression checks fail the gate.
        rng: randomness for the bootstrap (default: seeded from the contract's ``regression.seed``).
    """
    checks: list[CheckResult] = [check_slo(run, s, contract.slos) for s in contract.slos]
    notes: list[str] = []
    for r, role in ((run, "run"), (baseline, "baseline")):
        if r is not None and r.status != "complete":
            notes.append(f"the {role} {r.id} is {r.status}, not complete: its numbers may not be final")
    if run.records:
        lagging = client_bottleneck(build_view(run.records, settings=run.settings))
        if lagging is not None:
            notes.append(
                f"the load generator fell behind ({lagging.evidence[0]}): the offered load was lower than intended "
                "and latencies are a lower bound; rerun with more client processes"
            )
    reg = contract.regression
    if reg is not None and reg.limits and baseline is not None:
        notes.extend(comparability(baseline, run))
    if reg is not None and reg.limits:
        gen = rng if rng is not None else np.random.default_rng(reg.seed)
        if baseline is None:
            for lim in reg.limits:
                checks.append(
                    CheckResult(
                        f"regression {lim.key}",
                        "regression",
                        Verdict.MISSING,
                        None,
                        lim.describe(),
                        "%",
                        (baseline_missing or "no baseline run")
                        + "; tag one with `tailscope runs tag RUN_ID main` or pass --baseline",
                        line=lim.line,
                    )
                )
        else:
            if baseline.id == run.id:
                notes.append(f"the baseline is the run itself ({run.id}); regression checks compare it with itself")
            checks.extend(check_regression(run, baseline, lim, reg, gen, contract.slos) for lim in reg.limits)
    checks.extend(check_layer(layer_samples, lay) for lay in contract.layers)
    return GateResult(
        contract=contract.name,
        run_id=run.id,
        baseline_id=baseline.id if baseline else None,
        checks=tuple(checks),
        strict=strict,
        notes=tuple(notes),
    )
