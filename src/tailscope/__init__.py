"""tailscope: performance engineering for LLM and agent systems — measure, locate, plan, verify.

The public API is re-exported here and loaded lazily (PEP 562), so ``import tailscope`` and ``tailscope --help``
stay fast; ``tailscope.X`` imports the module that defines ``X`` on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name → defining module
_EXPORTS: dict[str, str] = {
    "AlertRules": "tailscope.verify.alerts",
    "AppServer": "tailscope.api.app",
    "AppStats": "tailscope.api.app",
    "BenchOptions": "tailscope.runner.options",
    "BenchResult": "tailscope.runner.bench_result",
    "BudgetPlan": "tailscope.plan.budget",
    "BuiltinServer": "tailscope.serve.embedded",
    "CacheabilityResult": "tailscope.api.cacheability",
    "Calibration": "tailscope.api.twin",
    "CapacityResult": "tailscope.api.capacity",
    "CatalogError": "tailscope.errors",
    "CheckResult": "tailscope.verify.evaluate",
    "Checklist": "tailscope.verify.checklist",
    "ClientCost": "tailscope.api.client",
    "CollectResult": "tailscope.api.trace",
    "ComparisonResult": "tailscope.verify.compare",
    "ConfigError": "tailscope.errors",
    "Contract": "tailscope.verify.contract",
    "ContractError": "tailscope.errors",
    "CostPlan": "tailscope.plan.napkin",
    "Diagnosis": "tailscope.verify.diagnose",
    "DrillResult": "tailscope.api.drill",
    "ErrorClass": "tailscope.records",
    "Estimate": "tailscope.plan.estimate",
    "FindMaxOutcome": "tailscope.runner.sweep_run",
    "Finding": "tailscope.verify.findings",
    "GateResult": "tailscope.verify.evaluate",
    "HeldOutRow": "tailscope.api.accuracy",
    "ImportResult": "tailscope.api.peers",
    "ImportedRun": "tailscope.api.peers",
    "IngestResult": "tailscope.api.trace",
    "InternalError": "tailscope.errors",
    "Interrupted": "tailscope.errors",
    "KvPlan": "tailscope.plan.kv",
    "LengthDist": "tailscope.workload.lengths",
    "LoadShape": "tailscope.workload.simple",
    "NapkinCapacity": "tailscope.plan.napkin",
    "NotFoundError": "tailscope.errors",
    "PlanError": "tailscope.errors",
    "ProfileError": "tailscope.errors",
    "Progress": "tailscope.runner.progress",
    "ProxyServer": "tailscope.api.proxy",
    "Repeatability": "tailscope.api.accuracy",
    "RepeatedBench": "tailscope.api.bench",
    "RequestCounts": "tailscope.records",
    "RequestRecord": "tailscope.records",
    "RequestSpec": "tailscope.workload.spec",
    "RoutingPlan": "tailscope.plan.routing",
    "Run": "tailscope.records",
    "RunData": "tailscope.verify.rundata",
    "RunKind": "tailscope.records",
    "RunListing": "tailscope.api.runs",
    "RunStatus": "tailscope.records",
    "RunStore": "tailscope.store.runs",
    "RunSummary": "tailscope.metrics.summary",
    "RunView": "tailscope.api.runs",
    "SSEError": "tailscope.errors",
    "ServerSample": "tailscope.records",
    "SimResult": "tailscope.api.sim",
    "Slo": "tailscope.metrics.slo",
    "Span": "tailscope.records",
    "Stats": "tailscope.metrics.percentiles",
    "Status": "tailscope.records",
    "StepModelValidation": "tailscope.api.accuracy",
    "StoreError": "tailscope.errors",
    "SweepOutcome": "tailscope.runner.sweep_run",
    "TailscopeError": "tailscope.errors",
    "Target": "tailscope.records",
    "TargetError": "tailscope.errors",
    "TokensSource": "tailscope.records",
    "TraceAnalysis": "tailscope.api.trace",
    "TraceDiff": "tailscope.api.trace",
    "TraceFormatError": "tailscope.errors",
    "TraceJoin": "tailscope.api.join",
    "TraceView": "tailscope.api.trace",
    "Translation": "tailscope.workload.translate",
    "TwinCheck": "tailscope.api.twin",
    "UnknownOperationError": "tailscope.errors",
    "Verdict": "tailscope.verify.evaluate",
    "WhatIfResult": "tailscope.api.whatif",
    "alerts": "tailscope.api.verify",
    "analyze_traces": "tailscope.api.trace",
    "bench": "tailscope.api.bench",
    "bench_async": "tailscope.api.bench",
    "bench_repeat": "tailscope.api.bench",
    "cacheability": "tailscope.api.cacheability",
    "calibrate": "tailscope.api.twin",
    "calibrate_async": "tailscope.api.twin",
    "checklist": "tailscope.api.checklist",
    "client_cost": "tailscope.api.client",
    "collect_traces": "tailscope.api.trace",
    "collect_traces_async": "tailscope.api.trace",
    "compare": "tailscope.api.verify",
    "compute_stats": "tailscope.metrics.percentiles",
    "delete_runs": "tailscope.api.runs",
    "delete_trace_sets": "tailscope.api.trace",
    "demo_traces": "tailscope.api.demo",
    "diagnose": "tailscope.api.verify",
    "diff_traces": "tailscope.api.trace",
    "drill": "tailscope.api.drill",
    "drill_async": "tailscope.api.drill",
    "export_run": "tailscope.api.runs",
    "find_max": "tailscope.api.bench",
    "gate": "tailscope.api.verify",
    "hot_loop": "tailscope.api.client",
    "import_run": "tailscope.api.peers",
    "ingest_traces": "tailscope.api.trace",
    "join_traces": "tailscope.api.join",
    "list_runs": "tailscope.api.runs",
    "load_run": "tailscope.api.verify",
    "measurement_repeatability": "tailscope.api.accuracy",
    "parse_length_spec": "tailscope.workload.lengths",
    "parse_slo": "tailscope.metrics.slo",
    "plan_budget": "tailscope.api.budget",
    "plan_capacity": "tailscope.api.capacity",
    "plan_cost": "tailscope.api.cost",
    "plan_estimate": "tailscope.api.plan",
    "plan_kv": "tailscope.api.plan",
    "plan_napkin": "tailscope.api.cost",
    "plan_unit_cost": "tailscope.api.cost",
    "plan_routing": "tailscope.api.routing",
    "repair_store": "tailscope.api.runs",
    "runs_trend": "tailscope.api.runs",
    "report_html": "tailscope.api.report",
    "run_app": "tailscope.api.app",
    "run_app_async": "tailscope.api.app",
    "run_proxy": "tailscope.api.proxy",
    "run_proxy_async": "tailscope.api.proxy",
    "show_run": "tailscope.api.runs",
    "show_trace": "tailscope.api.trace",
    "simple_requests": "tailscope.workload.simple",
    "simulate": "tailscope.api.sim",
    "spans_to_otlp_json": "tailscope.api.demo",
    "start_app": "tailscope.api.app",
    "start_builtin_server": "tailscope.api.serve",
    "start_proxy": "tailscope.api.proxy",
    "summarize": "tailscope.metrics.summary",
    "sweep": "tailscope.api.bench",
    "tag_run": "tailscope.api.runs",
    "translate_command": "tailscope.api.peers",
    "trace_sets": "tailscope.api.trace",
    "twin_check": "tailscope.api.twin",
    "twin_check_async": "tailscope.api.twin",
    "using_hot_loop": "tailscope.api.client",
    "validate_step_model": "tailscope.api.accuracy",
    "whatif": "tailscope.api.whatif",
    "write_demo_traces": "tailscope.api.demo",
    "write_report": "tailscope.api.report",
}

#: the public names (a test checks them against _EXPORTS and the TYPE_CHECKING imports)
__all__ = [
    "AlertRules",
    "AppServer",
    "AppStats",
    "BenchOptions",
    "BenchResult",
    "BudgetPlan",
    "BuiltinServer",
    "CacheabilityResult",
    "Calibration",
    "CapacityResult",
    "CatalogError",
    "CheckResult",
    "Checklist",
    "ClientCost",
    "CollectResult",
    "ComparisonResult",
    "ConfigError",
    "Contract",
    "ContractError",
    "CostPlan",
    "Diagnosis",
    "DrillResult",
    "ErrorClass",
    "Estimate",
    "FindMaxOutcome",
    "Finding",
    "GateResult",
    "HeldOutRow",
    "ImportResult",
    "ImportedRun",
    "IngestResult",
    "InternalError",
    "Interrupted",
    "KvPlan",
    "LengthDist",
    "LoadShape",
    "NapkinCapacity",
    "NotFoundError",
    "PlanError",
    "ProfileError",
    "Progress",
    "ProxyServer",
    "Repeatability",
    "RepeatedBench",
    "RequestCounts",
    "RequestRecord",
    "RequestSpec",
    "RoutingPlan",
    "Run",
    "RunData",
    "RunKind",
    "RunListing",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "RunView",
    "SSEError",
    "ServerSample",
    "SimResult",
    "Slo",
    "Span",
    "Stats",
    "Status",
    "StepModelValidation",
    "StoreError",
    "SweepOutcome",
    "TailscopeError",
    "Target",
    "TargetError",
    "TokensSource",
    "TraceAnalysis",
    "TraceDiff",
    "TraceFormatError",
    "TraceJoin",
    "TraceView",
    "Translation",
    "TwinCheck",
    "UnknownOperationError",
    "Verdict",
    "WhatIfResult",
    "__version__",
    "alerts",
    "analyze_traces",
    "bench",
    "bench_async",
    "bench_repeat",
    "cacheability",
    "calibrate",
    "calibrate_async",
    "checklist",
    "client_cost",
    "collect_traces",
    "collect_traces_async",
    "compare",
    "compute_stats",
    "delete_runs",
    "delete_trace_sets",
    "demo_traces",
    "diagnose",
    "diff_traces",
    "drill",
    "drill_async",
    "export_run",
    "find_max",
    "gate",
    "hot_loop",
    "import_run",
    "ingest_traces",
    "join_traces",
    "list_runs",
    "load_run",
    "measurement_repeatability",
    "parse_length_spec",
    "parse_slo",
    "plan_budget",
    "plan_capacity",
    "plan_cost",
    "plan_estimate",
    "plan_kv",
    "plan_napkin",
    "plan_routing",
    "plan_unit_cost",
    "repair_store",
    "report_html",
    "run_app",
    "run_app_async",
    "run_proxy",
    "run_proxy_async",
    "runs_trend",
    "show_run",
    "show_trace",
    "simple_requests",
    "simulate",
    "spans_to_otlp_json",
    "start_app",
    "start_builtin_server",
    "start_proxy",
    "summarize",
    "sweep",
    "tag_run",
    "trace_sets",
    "translate_command",
    "twin_check",
    "twin_check_async",
    "using_hot_loop",
    "validate_step_model",
    "whatif",
    "write_demo_traces",
    "write_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tailscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from tailscope.api.accuracy import (
        HeldOutRow,
        Repeatability,
        StepModelValidation,
        measurement_repeatability,
        validate_step_model,
    )
    from tailscope.api.app import AppServer, AppStats, run_app, run_app_async, start_app
    from tailscope.api.bench import RepeatedBench, bench, bench_async, bench_repeat, find_max, sweep
    from tailscope.api.budget import plan_budget
    from tailscope.api.cacheability import CacheabilityResult, cacheability
    from tailscope.api.capacity import CapacityResult, plan_capacity
    from tailscope.api.checklist import checklist
    from tailscope.api.client import ClientCost, client_cost, hot_loop, using_hot_loop
    from tailscope.api.cost import plan_cost, plan_napkin, plan_unit_cost
    from tailscope.api.demo import demo_traces, spans_to_otlp_json, write_demo_traces
    from tailscope.api.drill import DrillResult, drill, drill_async
    from tailscope.api.join import TraceJoin, join_traces
    from tailscope.api.peers import ImportedRun, ImportResult, import_run, translate_command
    from tailscope.api.plan import plan_estimate, plan_kv
    from tailscope.api.proxy import ProxyServer, run_proxy, run_proxy_async, start_proxy
    from tailscope.api.report import report_html, write_report
    from tailscope.api.routing import plan_routing
    from tailscope.api.runs import (
        RunListing,
        RunView,
        delete_runs,
        export_run,
        list_runs,
        repair_store,
        runs_trend,
        show_run,
        tag_run,
    )
    from tailscope.api.serve import start_builtin_server
    from tailscope.api.sim import SimResult, simulate
    from tailscope.api.trace import (
        CollectResult,
        IngestResult,
        TraceAnalysis,
        TraceDiff,
        TraceView,
        analyze_traces,
        collect_traces,
        collect_traces_async,
        delete_trace_sets,
        diff_traces,
        ingest_traces,
        show_trace,
        trace_sets,
    )
    from tailscope.api.twin import Calibration, TwinCheck, calibrate, calibrate_async, twin_check, twin_check_async
    from tailscope.api.verify import alerts, compare, diagnose, gate, load_run
    from tailscope.api.whatif import WhatIfResult, whatif
    from tailscope.errors import (
        CatalogError,
        ConfigError,
        ContractError,
        InternalError,
        Interrupted,
        NotFoundError,
        PlanError,
        ProfileError,
        SSEError,
        StoreError,
        TailscopeError,
        TargetError,
        TraceFormatError,
        UnknownOperationError,
    )
    from tailscope.metrics.percentiles import Stats, compute_stats
    from tailscope.metrics.slo import Slo, parse_slo
    from tailscope.metrics.summary import RunSummary, summarize
    from tailscope.plan.budget import BudgetPlan
    from tailscope.plan.estimate import Estimate
    from tailscope.plan.kv import KvPlan
    from tailscope.plan.napkin import CostPlan, NapkinCapacity
    from tailscope.plan.routing import RoutingPlan
    from tailscope.records import (
        ErrorClass,
        RequestCounts,
        RequestRecord,
        Run,
        RunKind,
        RunStatus,
        ServerSample,
        Span,
        Status,
        Target,
        TokensSource,
    )
    from tailscope.runner.bench_result import BenchResult
    from tailscope.runner.options import BenchOptions
    from tailscope.runner.progress import Progress
    from tailscope.runner.sweep_run import FindMaxOutcome, SweepOutcome
    from tailscope.serve.embedded import BuiltinServer
    from tailscope.store.runs import RunStore
    from tailscope.verify.alerts import AlertRules
    from tailscope.verify.checklist import Checklist
    from tailscope.verify.compare import ComparisonResult
    from tailscope.verify.contract import Contract
    from tailscope.verify.diagnose import Diagnosis
    from tailscope.verify.evaluate import CheckResult, GateResult, Verdict
    from tailscope.verify.findings import Finding
    from tailscope.verify.rundata import RunData
    from tailscope.workload.lengths import LengthDist, parse_length_spec
    from tailscope.workload.simple import LoadShape, simple_requests
    from tailscope.workload.spec import RequestSpec
    from tailscope.workload.translate import Translation
