"""``tailscope gate``: check a run against a performance contract; the exit code fails a CI build.

Parse → :func:`tailscope.gate` → render (:mod:`tailscope.report.verify`). A run or trace set that is not there is exit
code 2 (missing data), like an invalid contract. The verify commands import the library when they run, so their
``--help`` loads no numpy, pydantic or DuckDB.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import DB, command_app, emit_json, write_text
from tailscope.errors import NotFoundError, TailscopeError

_HELP = """Check a run against a performance contract (SLOs, regressions vs a baseline, dependency layers).

Exit code: 0 pass, 1 fail, 2 invalid input or missing data. Regression checks use a bootstrap confidence interval:
they fail only when the whole interval lies beyond the limit and report "inconclusive" (a pass, unless --strict) when it
straddles it.

Examples:

  tailscope gate contract.yaml --run latest

  tailscope gate contract.yaml --run out.json --baseline latest:main --junit gate.xml --markdown gate.md --github
"""


def _missing_data(exc: Exception) -> typer.Exit:
    typer.echo(f"tailscope: error: {exc}", err=True)
    return typer.Exit(2)


def gate(
    contract: Path = typer.Argument(..., help="Contract YAML (see docs/gates.md)."),
    run: str = typer.Option("latest", "--run", help="latest, a run id (or prefix), latest:TAG, or an export.json."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Baseline run for regression checks (default: the contract's regression.baseline)."
    ),
    traces: str | None = typer.Option(None, "--traces", help="Trace set (or spans JSON file) for layer checks."),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per check)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write a markdown summary here."),
    github: bool = typer.Option(False, "--github", help="Print GitHub Actions annotations (::error …)."),
    strict: bool = typer.Option(False, "--strict", help="Inconclusive regression checks fail the gate."),
    diagnose: bool = typer.Option(
        False, "--diagnose", help="When the gate does not pass, add `tailscope diagnose` findings to the outputs."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON here ('-' = stdout)."),
    seed: int | None = typer.Option(None, "--seed", help="Bootstrap seed (default: the contract's, else 0)."),
    db: Path | None = DB,
) -> None:
    from tailscope.api.verify import gate as run_gate
    from tailscope.api.verify import load_layer_samples, load_run
    from tailscope.io.contracts import load_contract
    from tailscope.report.verify import (
        findings_markdown,
        findings_text,
        gate_github,
        gate_junit,
        gate_markdown,
        gate_text,
    )

    spec = load_contract(contract)
    try:
        run_data = load_run(run, store=db)
    except NotFoundError as exc:
        raise _missing_data(exc) from None
    try:
        layers = load_layer_samples(traces, store=db) if traces is not None else None
    except TailscopeError as exc:
        raise _missing_data(exc) from None
    result = run_gate(
        spec, run_data, baseline=baseline, traces=layers, store=db, strict=strict, seed=seed, diagnose=diagnose
    )
    found = result.diagnosis
    json_stdout = json_out is not None and str(json_out) == "-"
    # with --json - the JSON alone goes to stdout (pipe it to jq); the table goes to stderr
    typer.echo(gate_text(result) + ("\n" + findings_text(found) if found else ""), nl=False, err=json_stdout)
    if junit is not None:
        write_text(junit, gate_junit(result), "--junit")
    if markdown is not None:
        write_text(markdown, gate_markdown(result) + ("\n" + findings_markdown(found) if found else ""), "--markdown")
    if github:
        typer.echo(gate_github(result, contract_path=str(contract)), nl=False, err=json_stdout)
    emit_json(result.to_dict(), json_out)
    raise typer.Exit(result.exit_code)


app = command_app()
app.command("gate", help=_HELP)(gate)
