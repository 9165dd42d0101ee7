"""A run's verdict for CI: did it meet its SLOs, and did few enough requests fail?

``tailscope bench`` exits non-zero when the verdict fails (k6 does the same with its thresholds), so a bench step in
CI fails on a missed SLO or an error burst without a separate gate. SLO results already count failed requests as
slower than any limit (:class:`~tailscope.metrics.slo.SloResult`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailscope.metrics.summary import RunSummary

#: the share of failed requests above which a run fails by default (--max-error-rate)
DEFAULT_MAX_ERROR_RATE = 0.01


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a run passed, and every reason it did not.

    Attributes:
        passed: every SLO met, the failed share ≤ ``max_error_rate`` and at least one request measured.
        reasons: one line per failed condition (empty when passed).
        error_rate: failed ÷ measured requests (0 when none were measured).
        max_error_rate: the limit applied.
    """

    passed: bool
    reasons: tuple[str, ...]
    error_rate: float
    max_error_rate: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "error_rate": self.error_rate,
            "max_error_rate": self.max_error_rate,
        }


def run_verdict(summary: RunSummary, *, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> Verdict:
    """The verdict of a finished run (``max_error_rate`` as a fraction, 0.01 = 1 %)."""
    reasons: list[str] = []
    total = summary.requests.total
    error_rate = summary.requests.failed / total if total else 0.0
    if total == 0:
        reasons.append("no request was measured (all were warmup, or none completed the schedule)")
    if error_rate > max_error_rate:
        top = ", ".join(f"{k}={v}" for k, v in sorted(summary.errors.items(), key=lambda kv: -kv[1])[:3])
        reasons.append(
            f"{summary.requests.failed} of {total} requests failed ({error_rate:.1%} > --max-error-rate "
            f"{max_error_rate:.1%}){': ' + top if top else ''}"
        )
    for r in summary.slo:
        if not r.passed:
            seen = "no samples" if r.observed_ms is None else f"{r.observed_ms:,.1f} ms"
            if r.observed_ms == float("inf"):
                seen = f"∞ ({r.failed} failed requests count as slower than any limit)"
            reasons.append(f"SLO {r.slo.key} ≤ {r.slo.threshold_ms:g} ms missed: {seen}")
    return Verdict(passed=not reasons, reasons=tuple(reasons), error_rate=error_rate, max_error_rate=max_error_rate)
