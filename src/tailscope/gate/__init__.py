"""Verify: performance contracts, CI gates, bootstrap comparison, diagnosis rules and alert generation (pure core).

* :mod:`~tailscope.gate.contract` — the contract file (validated at the boundary, line-numbered errors);
* :mod:`~tailscope.gate.evaluate` — SLO, regression and layer checks and their verdicts;
* :mod:`~tailscope.gate.bootstrap` — vectorised bootstrap intervals of percentile and rate differences;
* :mod:`~tailscope.gate.compare` — N-run comparison with significance marks;
* :mod:`~tailscope.gate.diagnose` — findings from the ``rules_*`` modules, ordered by impact;
* :mod:`~tailscope.gate.alerts` / :mod:`~tailscope.gate.grafana` — Prometheus rules and a dashboard from a contract;
* :mod:`~tailscope.gate.render` — console text, JUnit XML, markdown and GitHub annotations.
"""

from __future__ import annotations

from tailscope.gate.alerts import AlertOptions, AlertRules, alert_rules
from tailscope.gate.compare import Comparison, compare_runs
from tailscope.gate.contract import Contract, dump_contract, parse_contract
from tailscope.gate.diagnose import diagnose
from tailscope.gate.evaluate import CheckResult, GateResult, Verdict, evaluate
from tailscope.gate.findings import Finding
from tailscope.gate.rundata import RunData, run_from_export

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
