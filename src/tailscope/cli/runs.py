"""``tailscope runs``: list, show, export, tag, delete and repair the runs kept in the store."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import command_app

runs_app = command_app(
    help="Runs kept in the embedded store.\n\nExample: tailscope runs list; tailscope runs show latest",
    no_args_is_help=True,
)

_DB = typer.Option(None, "--db", help="Store path (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb).")


@runs_app.command("list")
def list_(
    limit: int = typer.Option(30, "--limit", help="How many runs (newest first)."),
    kind: str | None = typer.Option(None, "--kind", help="Only bench, sim or trace runs."),
    tag: str | None = typer.Option(None, "--tag", help="Only runs with this tag (probe: calibration probes)."),
    json_out: str | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the runs with their request counts as JSON to PATH (- = stdout)."
    ),
    db: Path | None = _DB,
) -> None:
    """List runs with their headline numbers; repairs crashed runs first. Example: tailscope runs list --limit 10"""
    from tailscope.cli.runs_impl import list_runs

    list_runs(db=db, limit=limit, kind=kind, tag=tag, json_out=json_out)


@runs_app.command("show")
def show(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, latest or latest:TAG."),
    dialect: str = typer.Option(
        "tailscope", "--dialect", help="Recompute metrics as tailscope, vllm, aiperf, guidellm or sglang define them."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    db: Path | None = _DB,
) -> None:
    """Show a run's summary again. Example: tailscope runs show latest --dialect vllm"""
    from tailscope.cli.runs_impl import show_run

    show_run(db=db, ref=run_id, dialect=dialect, as_json=json_out)


@runs_app.command("export")
def export(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, latest or latest:TAG."),
    fmt: str = typer.Option("json", "--format", help="parquet, csv or json."),
    out: Path = typer.Option(..., "--out", help="Output file."),
    db: Path | None = _DB,
) -> None:
    """Export a run's records. Example: tailscope runs export latest --format parquet --out run.parquet"""
    from tailscope.cli.runs_impl import export_run

    export_run(db=db, ref=run_id, fmt=fmt, out=out)


@runs_app.command("tag")
def tag(
    run_id: str = typer.Argument(..., help="Run id, unique prefix or latest."),
    name: str = typer.Argument(..., help="Tag name, e.g. main (baselines are found as latest:main)."),
    db: Path | None = _DB,
) -> None:
    """Tag a run (tags name baselines). Example: tailscope runs tag latest main"""
    from tailscope.store.runs import RunStore

    full = RunStore(db).tag(run_id, name)
    typer.echo(f"tagged {full} as {name}")


@runs_app.command("delete")
def delete(
    run_ids: list[str] = typer.Argument(..., help="Run ids, unique prefixes, latest or latest:TAG."),
    db: Path | None = _DB,
) -> None:
    """Delete runs with their records, samples, tags and leftovers. Example: tailscope runs delete 20261129-0800"""
    from tailscope.store.runs import RunStore

    deleted = RunStore(db).delete_runs(run_ids)
    typer.echo(f"deleted {len(deleted)} run(s): " + ", ".join(deleted))


@runs_app.command("repair")
def repair(db: Path | None = _DB) -> None:
    """Fold records of crashed runs into the store, mark them incomplete, list quarantined batches.

    Example: tailscope runs repair
    """
    from tailscope.cli.runs_impl import repair_runs

    repair_runs(db=db)
