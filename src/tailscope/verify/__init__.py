"""Verify: performance contracts, CI gates, bootstrap comparison, diagnosis rules and alert generation (pure core).

* :mod:`~tailscope.verify.contract` — the contract file (validated at the boundary, line-numbered errors);
* :mod:`~tailscope.verify.evaluate` — SLO, regression and layer checks and their verdicts;
* :mod:`~tailscope.verify.bootstrap` — vectorised bootstrap intervals of percentile and rate differences;
* :mod:`~tailscope.verify.compare` — N-run comparison with significance marks;
* :mod:`~tailscope.verify.diagnose` — findings from the ``rules_*`` modules, ordered by impact;
* :mod:`~tailscope.verify.alerts` / :mod:`~tailscope.verify.grafana` — Prometheus rules and a dashboard from a contract;
* :mod:`~tailscope.verify.render` — console text, JUnit XML, markdown and GitHub annotations.
"""

from __future__ import annotations

from tailscope.verify.alerts import AlertOptions, AlertRules, alert_rules
from tailscope.verify.compare import Comparison, compare_runs
from tailscope.verify.contract import Contract, dump_contract, parse_contract
from tailscope.verify.diagnose import diagnose
from tailscope.verify.evaluate import CheckResult, GateResult, Verdict, evaluate
from tailscope.verify.findings import Finding
from tailscope.verify.rundata import RunData, run_from_export

__all__ = [
    "AlertOptions",
    "AlertRules",
    "CheckResult",
    "Comparison",
    "Contract",
    "Finding",
    "GateResult",
    "RunData",
    "Verdict",
    "alert_rules",
    "compare_runs",
    "diagnose",
    "dump_contract",
    "evaluate",
    "parse_contract",
    "run_from_export",
]
