"""``tailscope gate``: check a run against a performance contract; the exit code fails a CI build.

Also holds the run loading shared by ``compare`` and ``diagnose``: a run reference is a store id (or prefix,
``latest``, ``latest:TAG``) or the path of a ``tailscope bench --json`` export.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tailscope.cli.common import command_app

if TYPE_CHECKING:
    from tailscope.verify.rundata import RunData

_HELP = """Check a run against a performance contract (SLOs, regressions vs a baseline, dependency layers).

Exit code: 0 pass, 1 fail, 2 invalid input or missing data. Regression checks use a bootstrap confidence interval:
they fail only when the whole interval lies beyond the limit and report "inconclusive" (a pass, unless --strict) when it
straddles it.

Examples:

  tailscope gate contract.yaml --run latest

  tailscope gate contract.yaml --run out.json --baseline latest:main --junit gate.xml --markdown gate.md --github
"""


def load_contract_file(path: Path) -> Any:
    """Read and validate a contract file (ContractError names file:line: field)."""
    from tailscope.errors import ContractError
    from tailscope.verify.contract import parse_contract

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContractError(f"{path}: cannot read the contract ({exc.strerror or exc})") from None
    return parse_contract(text, str(path))


def is_export_ref(ref: str) -> bool:
    """True when ``ref`` names a JSON export file rather than a stored run."""
    return ref.endswith(".json") or Path(ref).is_file()


def load_run_data(ref: str, db: Path | None = None) -> RunData:
    """Load a run by store reference or from a bench ``--json`` export.

    Raises:
        ContractError: the export cannot be read or is not an export (exit 2).
        NotFoundError: no such run in the store.
    """
    from tailscope.errors import ContractError, NotFoundError

    if is_export_ref(ref):
        import json

        from tailscope.verify.rundata import run_from_export

        path = Path(ref)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ContractError(f"{ref}: cannot read the export ({exc.strerror or exc})") from None
        except json.JSONDecodeError as exc:
            raise ContractError(f"{ref}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        return run_from_export(doc, source=ref)

    from tailscope.store.runs import RunStore
    from tailscope.verify.rundata import RunData

    store = RunStore(db)
    if not store.db.exists:
        raise NotFoundError(f"no store at {store.db.path}: run `tailscope bench` first, or pass an export.json")
    stored = store.get_run(ref)
    run_id = stored.run.id
    return RunData(
        id=run_id,
        kind=stored.run.kind.value,
        records=tuple(store.load_records(run_id)),
        samples=tuple(store.load_samples(run_id)),
        summary=stored.summary,
        settings=stored.run.settings,
        status=stored.run.status.value,
    )


def load_layer_samples(ref: str, db: Path | None = None) -> dict[str, Any]:
    """Per layer, the critical-path ms each trace spends in it, from a spans JSON file or a stored trace set.

    Raises:
        ContractError: the file is malformed. NotFoundError: no such trace set.
    """
    from tailscope.errors import ContractError, NotFoundError
    from tailscope.verify.layers import layer_samples_from_facts, layer_samples_from_json

    if is_export_ref(ref):
        import json

        try:
            doc = json.loads(Path(ref).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ContractError(f"{ref}: cannot read spans JSON ({exc})") from None
        return layer_samples_from_json(doc, source=ref)
    from tailscope.store.spans import SpanStore
    from tailscope.trace.ingest.sets import set_facts

    store = SpanStore(db)
    if not store.db.exists:
        raise NotFoundError(
            f"no store at {store.db.path}: ingest traces with `tailscope trace ingest FILES --set NAME`"
        )
    return layer_samples_from_facts(set_facts(store, ref))


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
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
) -> None:
    import json

    import numpy as np

    from tailscope.errors import NotFoundError, TailscopeError
    from tailscope.verify.evaluate import evaluate
    from tailscope.verify.render import render_github, render_junit, render_markdown, render_text

    spec = load_contract_file(contract)
    try:
        run_data = load_run_data(run, db)
    except NotFoundError as exc:
        raise _missing_data(exc) from None
    base_data = None
    base_ref = baseline or (spec.regression.baseline if spec.regression else None)
    baseline_missing = None
    if spec.regression is not None and spec.regression.limits and base_ref:
        try:
            base_data = load_run_data(base_ref, db)
        except NotFoundError as exc:
            baseline_missing = f"baseline {base_ref!r}: {exc}"
    layer_samples = None
    if traces is not None:
        try:
            layer_samples = load_layer_samples(traces, db)
        except TailscopeError as exc:
            raise _missing_data(exc) from None
    rng = np.random.default_rng(seed) if seed is not None else None
    result = evaluate(
        spec,
        run_data,
        baseline=base_data,
        baseline_missing=baseline_missing,
        layer_samples=layer_samples,
        strict=strict,
        rng=rng,
    )
    json_stdout = json_out is not None and str(json_out) == "-"
    findings_text = findings_md = ""
    findings: list[Any] = []
    if diagnose and result.exit_code != 0 and run_data.records:
        from tailscope.verify.diagnose import diagnose as run_rules
        from tailscope.verify.diagnose import render_findings_markdown, render_findings_text

        findings = run_rules(run_data.records, run_data.samples, settings=run_data.settings)
        findings_text = "\n" + render_findings_text(findings, run_data.id)
        findings_md = "\n" + render_findings_markdown(findings, run_data.id)
    # with --json - the JSON alone goes to stdout (pipe it to jq); the table goes to stderr
    typer.echo(render_text(result) + findings_text, nl=False, err=json_stdout)
    if junit is not None:
        _write(junit, render_junit(result), "--junit")
    if markdown is not None:
        _write(markdown, render_markdown(result) + findings_md, "--markdown")
    if github:
        typer.echo(render_github(result, contract_path=str(contract)), nl=False, err=json_stdout)
    if json_out is not None:
        doc = result.to_dict()
        if findings:
            doc["findings"] = [f.to_dict() for f in findings]
        text = json.dumps(doc, indent=2)
        if json_stdout:
            typer.echo(text)
        else:
            _write(json_out, text + "\n", "--json")
    raise typer.Exit(result.exit_code)


def _write(path: Path, text: str, flag: str) -> None:
    from tailscope.errors import ConfigError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


app = command_app()
app.command("gate", help=_HELP)(gate)
