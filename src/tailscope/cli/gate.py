"""``tailscope gate``: check a run against a performance contract; the exit code fails a CI build.

Parse → :func:`tailscope.gate` → render (:mod:`tailscope.report.verify`). A run or trace set that is not there is exit
code 2 (missing data), like an invalid contract. The verify commands import the library when they run, so their
``--help`` loads no numpy, pydantic or DuckDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import GATE
from tailscope.cli import common as opt
from tailscope.cli.common import MissingInput, command_app, emit_json, with_flags, write_text
from tailscope.errors import NotFoundError, TailscopeError
from tailscope.files import to_stdout

_HELP = """Check a run against a performance contract (SLOs, regressions vs a baseline, dependency layers).

Exit code: 0 pass, 1 fail, 2 invalid input or missing data. Regression checks use a bootstrap confidence interval:
they fail only when the whole interval lies beyond the limit and report "inconclusive" (a pass, unless --strict) when it
straddles it.

Examples:

  tailscope gate contract.yaml --run latest

  tailscope gate contract.yaml --run out.json --baseline latest:main --junit gate.xml --markdown gate.md --github

  tailscope gate --contract deps.yaml --traces prod-traces     # trace-only: the layers: SLOs on a trace set

A contract with only `layers:` SLOs and --traces (or --trace-only) is gated on the trace set alone, with no run.
"""


@with_flags(GATE.values())  # the options of tailscope.gate (api/_flags.py)
def gate(
    contract_arg: Path | None = typer.Argument(None, metavar="CONTRACT", help="Contract YAML (see docs/gates.md)."),
    contract_opt: Path | None = typer.Option(None, "--contract", help="The contract YAML (instead of the argument)."),
    run: str | None = typer.Option(
        None, "--run", help="latest (default), a run id (or prefix), latest:TAG, or an export.json."
    ),
    trace_only: bool = typer.Option(
        False, "--trace-only", help="Gate the contract's layers: SLOs on --traces alone (no run)."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per check)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write a markdown summary here."),
    github: bool = typer.Option(False, "--github", help="Print GitHub Actions annotations (::error …)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON here ('-' = stdout)."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    from tailscope.api.verify import gate as run_gate
    from tailscope.api.verify import load_layer_samples, load_run
    from tailscope.io.contracts import load_contract
    from tailscope.report import verify as show

    contract = contract_opt or contract_arg
    if contract is None or (contract_opt is not None and contract_arg is not None):
        raise MissingInput("give the contract once: `tailscope gate CONTRACT` or --contract CONTRACT")
    spec, traces = load_contract(contract), options["traces"]
    layers_only = not spec.slos and not (spec.regression and spec.regression.limits)
    if trace_only or (run is None and traces is not None and layers_only):
        if run is not None:
            raise MissingInput("--trace-only gates a trace set, not a run; drop --run")
        if traces is None:
            raise MissingInput("--trace-only needs --traces SET (a trace set or a spans JSON file)")
        try:
            result = run_gate(spec, None, traces=traces, store=db)
        except NotFoundError as exc:
            raise MissingInput(str(exc)) from None
    else:
        try:
            run_data = load_run(run or "latest", store=db)
            layers = load_layer_samples(traces, store=db) if traces is not None else None
        except TailscopeError as exc:  # no such run or trace set, an unreadable export: missing data
            raise MissingInput(str(exc)) from None
        result = run_gate(spec, run_data, **{**options, "traces": layers}, store=db)
    found = result.diagnosis
    json_stdout = to_stdout(json_out)
    # with --json - the JSON alone goes to stdout (pipe it to jq); the table goes to stderr
    typer.echo(show.gate_text(result) + ("\n" + show.findings_text(found) if found else ""), nl=False, err=json_stdout)
    if junit is not None:
        write_text(junit, show.gate_junit(result), "--junit")
    if markdown is not None:
        write_text(
            markdown, show.gate_markdown(result) + ("\n" + show.findings_markdown(found) if found else ""), "--markdown"
        )
    if github:
        typer.echo(show.gate_github(result, contract_path=str(contract)), nl=False, err=json_stdout)
    emit_json(result.to_dict(), json_out)
    raise typer.Exit(result.exit_code)


app = command_app()
app.command("gate", help=_HELP)(gate)
