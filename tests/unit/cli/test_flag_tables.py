"""The flags the library declares (:mod:`tailscope.api._flags`): one per BenchOptions field a command line sets, each
with the field's default; sim's and serve's with the defaults of :func:`tailscope.simulate` and the engine; and the
commands offer every one of them as declared."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import typer

from tailscope.api._flags import (
    ALERTS,
    APP,
    BENCH_FLAGS,
    CALIBRATE,
    CHECKLIST,
    COMPARE,
    DIAGNOSE,
    ENGINE_FLAGS,
    FAULT_FLAGS,
    GATE,
    PLAN_BUDGET,
    PLAN_CAPACITY,
    PLAN_COST,
    PLAN_ESTIMATE,
    PLAN_KV,
    PLAN_ROUTING,
    PROXY_RULES,
    REPORT,
    RUNS_LIST,
    RUNS_TREND,
    SERVE,
    SERVE_POOLS,
    SIM_FLAGS,
    TRACE_CACHEABILITY,
    TRACE_COLLECT,
    TRACE_INGEST,
    TRACE_PATH,
    TRACE_WHATIF,
    TWIN_CHECK,
    Flag,
    pick,
)
from tailscope.cli.main import app
from tailscope.runner.options import DEFAULTS, BenchOptions


def test_every_field_but_the_store_has_a_flag() -> None:
    assert set(BENCH_FLAGS) == set(BenchOptions.field_names()) - {"traces_db"}


def test_a_flag_defaults_to_its_field_or_the_documented_default() -> None:
    plain = BenchOptions()
    for name, flag in BENCH_FLAGS.items():
        expected = DEFAULTS[name] if name in DEFAULTS else getattr(plain, name)
        assert flag.default == expected, name
        assert flag.decls.split()[0].startswith("--"), name


def _params(*path: str) -> dict[str, Any]:
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.get_command(typer.Context(cmd), name)
    return {p.name: p for p in cmd.params}


TABLES = [
    (("bench",), BENCH_FLAGS),
    (("sim",), SIM_FLAGS),
    (("serve",), ENGINE_FLAGS),
    (("plan", "kv"), PLAN_KV),
    (("plan", "estimate"), PLAN_ESTIMATE),
    (("plan", "capacity"), PLAN_CAPACITY),
    (("plan", "cost"), PLAN_COST),
    (("plan", "routing"), PLAN_ROUTING),
    (("compare",), COMPARE),
    (("alerts",), ALERTS),
    (("report",), REPORT),
    (("checklist",), CHECKLIST),
    (("calibrate",), CALIBRATE),
    (("serve",), FAULT_FLAGS),
    (("proxy",), PROXY_RULES),
    (("app",), APP),
    (("twin", "check"), TWIN_CHECK),
    (("runs", "list"), RUNS_LIST),
    (("runs", "trend"), RUNS_TREND),
    (("diagnose",), DIAGNOSE),
    (("serve",), SERVE),
    (("serve",), SERVE_POOLS),
    (("gate",), GATE),
    (("plan", "budget"), PLAN_BUDGET),
    (("trace", "whatif"), TRACE_WHATIF),
    (("trace", "cacheability"), TRACE_CACHEABILITY),
    (("trace", "ingest"), TRACE_INGEST),
    (("trace", "collect"), TRACE_COLLECT),
    *[(("trace", name), TRACE_PATH) for name in ("show", "analyze", "diff")],
]


@pytest.mark.parametrize(("path", "flags"), TABLES)
def test_the_commands_offer_every_declared_flag(path: tuple[str, ...], flags: dict[str, Flag]) -> None:
    params = _params(*path)
    for name, flag in flags.items():
        assert name in params, name
        assert [*params[name].opts, *params[name].secondary_opts] == flag.decls.replace("/", " ").split(), name
        assert params[name].help == flag.help
        if flag.default is ...:
            assert params[name].required, name
        else:
            assert params[name].default == (list(flag.default) if isinstance(flag.default, tuple) else flag.default)


def test_sim_flags_default_to_simulate_s() -> None:
    from tailscope.api.sim import simulate

    api = inspect.signature(simulate).parameters
    for name, flag in SIM_FLAGS.items():
        if name == "no_prefix_caching":
            assert api["prefix_caching"].default is (not flag.default)
        else:
            assert flag.default == api[name].default, name


def test_engine_flags_default_to_the_engine_s() -> None:
    from tailscope.api.serve import run_server
    from tailscope.serve.engine_factory import EngineFlags

    engine, server = EngineFlags(), inspect.signature(run_server).parameters
    for name, flag in {**ENGINE_FLAGS, **SERVE_POOLS}.items():
        if name in ("model", "gpu"):
            assert flag.default == server[name].default
        else:
            field = {"no_prefix_caching": "enable_prefix_caching", "engine": "backend"}.get(name, name)
            expected = not engine.enable_prefix_caching if name == "no_prefix_caching" else getattr(engine, field)
            assert flag.default == expected, name


def test_plan_flags_default_to_the_planners() -> None:
    from tailscope.api import capacity, cost, plan

    for table, fns in ((PLAN_KV, [plan.plan_kv]), (PLAN_ESTIMATE, [plan.plan_estimate]),
                       (PLAN_CAPACITY, [capacity.plan_capacity, cost.plan_napkin]),
                       (PLAN_COST, [cost.plan_cost, cost.plan_unit_cost])):  # fmt: skip
        api = {n: p for fn in fns for n, p in inspect.signature(fn).parameters.items()}
        for name, flag in table.items():
            param = api[{"steady_window": "steady_window_s"}.get(name, name)]
            if param.default is inspect.Parameter.empty:  # required by the API: required, or checked by the command
                continue
            if table is PLAN_CAPACITY and name == "output_tokens":  # None: 256, or the napkin form's mean
                continue
            assert flag.default == param.default, name


def test_the_other_tables_default_to_their_functions() -> None:
    from tailscope.api import (
        app,
        budget,
        cacheability,
        checklist,
        report,
        routing,
        runs,
        serve,
        trace,
        twin,
        verify,
        whatif,
    )
    from tailscope.io.proxy_rules import rules_from_flags
    from tailscope.serve.faults import FaultConfig

    assert {n: f.default for n, f in FAULT_FLAGS.items()} == {n: getattr(FaultConfig(), n) for n in FAULT_FLAGS}

    for table, fn in ((COMPARE, verify.compare), (ALERTS, verify.alerts), (REPORT, report.write_report),
                      (PLAN_ROUTING, routing.plan_routing), (CHECKLIST, checklist.checklist),
                      (CALIBRATE, twin.calibrate_async), (PROXY_RULES, rules_from_flags),
                      (APP, app.run_app_async), (TWIN_CHECK, twin.twin_check_async), (RUNS_LIST, runs.list_runs),
                      (RUNS_TREND, runs.runs_trend), (DIAGNOSE, verify.diagnose), (SERVE, serve.run_server),
                      (GATE, verify.gate), (PLAN_BUDGET, budget.plan_budget), (TRACE_WHATIF, whatif.whatif),
                      (TRACE_CACHEABILITY, cacheability.cacheability), (TRACE_INGEST, trace.ingest_traces),
                      (TRACE_COLLECT, trace.collect_traces_async), (TRACE_PATH, trace.analyze_traces),
                      (TRACE_PATH, trace.diff_traces), (TRACE_PATH, trace.show_trace)):  # fmt: skip
        api = inspect.signature(fn).parameters
        for name, flag in table.items():
            default = api[name].default
            if (table, name) in ((COMPARE, "percentiles"), (CALIBRATE, "out"), (TRACE_COLLECT, "duration")):
                # a string for "p50,p90,p99"; a file; 0 for "until stopped"
                continue
            if (flag.default == "" and default == ()) or (flag.default is ... and default is inspect.Parameter.empty):
                continue  # --fix "": no fixes; required
            assert flag.default == default or (flag.default == () and default is None), (fn, name)


def test_pick_changes_a_default_for_another_command() -> None:
    (out,) = pick("output_tokens", output_tokens={"default": "64"})
    assert _params("twin", "check")["output_tokens"].default == "64"
    assert (out.default, out.decls) == ("64", "--output-tokens")
    assert BENCH_FLAGS["output_tokens"].default == "128"


def test_twin_check_passes_the_workload_flags_to_the_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from typer.testing import CliRunner

    import tailscope.api.twin as twin_api

    seen: dict[str, Any] = {}

    def fake(*args: Any, **kw: Any) -> None:
        seen.update(kw, args=args)
        raise SystemExit(0)

    monkeypatch.setattr(twin_api, "twin_check", fake)
    argv = ["twin", "check", "--calibration", "t.yaml", "--url", "http://127.0.0.1:9", "--rate", "2", "-n", "30"]
    res = CliRunner().invoke(app, [*argv, "--db", str(tmp_path / "s.duckdb")])
    assert res.exit_code == 0, res.output
    assert [str(a) for a in seen["args"]] == ["t.yaml", "http://127.0.0.1:9"]
    assert (seen["rate"], seen["requests"], seen["output_tokens"], seen["arrival"]) == (2.0, 30, "64", "poisson")
    assert (seen["concurrency"], seen["profile"]) == (None, None)
