"""Verify: performance contracts, CI gates, bootstrap comparison, diagnosis rules and alert generation (pure core).

* :mod:`~tailscope.verify.contract` — the contract's checks (frozen dataclasses; files are read by
  :mod:`tailscope.io.contracts`);
* :mod:`~tailscope.verify.evaluate` — SLO, regression and layer checks and their verdicts;
* :mod:`~tailscope.verify.bootstrap` — vectorised bootstrap intervals of percentile and rate differences;
* :mod:`~tailscope.verify.compare` — N-run comparison with significance marks;
* :mod:`~tailscope.verify.precision` — how precisely repeated runs know a percentile, and when to stop repeating;
* :mod:`~tailscope.verify.diagnose` — findings from the ``rules_*`` modules, ordered by impact;
* :mod:`~tailscope.verify.alerts` / :mod:`~tailscope.verify.grafana` — Prometheus rules and a dashboard from a contract.

The public entry points are :func:`tailscope.gate`, :func:`tailscope.compare`, :func:`tailscope.diagnose` and
:func:`tailscope.alerts`; their results render with :mod:`tailscope.report.verify`.
"""

from __future__ import annotations

from tailscope.verify.alerts import AlertOptions, AlertRules, alert_rules
from tailscope.verify.compare import ComparisonResult, compare_runs
from tailscope.verify.contract import Contract
from tailscope.verify.diagnose import Diagnosis, diagnose
from tailscope.verify.evaluate import CheckResult, GateResult, Verdict, evaluate
from tailscope.verify.findings import Finding
from tailscope.verify.rundata import RunData, run_from_export

__all__ = [
    "AlertOptions",
    "AlertRules",
    "CheckResult",
    "ComparisonResult",
    "Contract",
    "Diagnosis",
    "Finding",
    "GateResult",
    "RunData",
    "Verdict",
    "alert_rules",
    "compare_runs",
    "diagnose",
    "evaluate",
    "run_from_export",
]
