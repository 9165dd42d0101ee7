"""``tailscope runs``: list, show, export, tag, delete and repair the runs kept in the store (parse, call, render)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import RUNS_LIST, RUNS_TREND
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, emit_json, err_console, json_path_option, with_flags

runs_app = command_app(
    help="Runs kept in the embedded store.\n\nExample: tailscope runs list; tailscope runs show latest",
    no_args_is_help=True,
)


@runs_app.command("list")
@with_flags(RUNS_LIST.values())  # the options of tailscope.list_runs (api/_flags.py)
def list_(
    json_out: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the runs with their request counts as JSON to PATH (- = stdout)."
    ),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """List runs with their headline numbers; repairs crashed runs first. Example: tailscope runs list --limit 10"""
    from tailscope.api.runs import list_runs
    from tailscope.metrics.document import clean_json
    from tailscope.report.console import stdout_console
    from tailscope.report.runs_console import print_listing_repair, runs_table

    listing = list_runs(store=db, **options)
    print_listing_repair(listing, err_console())
    if json_out is not None:
        emit_json(clean_json(listing.to_dict()), json_out)
        opt.wrote(json_out)
        return
    con = stdout_console()
    if not listing.runs:
        con.print(f"no runs in {listing.store_path} yet — try `tailscope bench --requests 50`")
        return
    con.print(runs_table(listing.runs))


@runs_app.command("trend")
@with_flags(RUNS_TREND.values())  # the options of tailscope.runs_trend (api/_flags.py)
def trend(
    json_out: Path | None = typer.Option(None, "--json", metavar="PATH", help="Write the trend as JSON (- = stdout)."),
    html_out: Path | None = typer.Option(None, "--html", metavar="PATH", help="Write an HTML page with the charts."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """TTFT and TPOT p50/p99 and daily tokens across runs over time, change points marked (the weekly review).

    Example: tailscope runs trend --tag main --since 30d --html trend.html
    """
    from tailscope.api.runs import runs_trend
    from tailscope.report.console import stdout_console
    from tailscope.report.html import write_html
    from tailscope.report.trend import print_trend, render_trend_html

    t = runs_trend(**options, store=db)
    if html_out is not None:
        write_html(html_out, render_trend_html(t))
        opt.wrote(html_out)
    if emit_json(t.to_dict(), json_out):
        return
    print_trend(stdout_console(), t)


@runs_app.command("show")
def show(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, latest or latest:TAG."),
    dialect: str = typer.Option(
        "tailscope", "--dialect", help="Recompute metrics as tailscope, vllm, aiperf, guidellm or sglang define them."
    ),
    json_out: Path | None = json_path_option("the run and its summary"),
    db: opt.Db = None,
) -> None:
    """Show a run's summary again. Example: tailscope runs show latest --dialect vllm"""
    from tailscope.api.runs import show_run
    from tailscope.report.console import stdout_console
    from tailscope.report.runs_console import print_run_view

    view = show_run(run_id, dialect=dialect, store=db)

    def render() -> None:  # an imported run also shows its figures as the importing tool defines them
        imported = view.run.settings.get("import") if view.dialect == "tailscope" else None
        tool = (
            show_run(view.run.id, dialect=str(imported.get("tool")), store=db) if isinstance(imported, dict) else None
        )
        print_run_view(stdout_console(), view.run, view.summary, view.dialect, tool.summary if tool else None)

    opt.json_or_render(view.to_dict(), json_out, render)


@runs_app.command("import")
def import_(
    path: Path = typer.Argument(..., help="The result file: vLLM bench JSON, GuideLLM benchmarks.json, AIPerf JSONL."),
    tool: str = typer.Option(..., "--from", help="The tool that wrote it: vllm, guidellm or aiperf."),
    tag: str | None = typer.Option(None, "--tag", help="Tag the imported run(s)."),
    json_out: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the bench --json document of the imported run(s) to PATH."
    ),
    db: opt.Db = None,
) -> None:
    """Import another tool's result file as runs (kind import), with per-request records: compare, gate, report and
    diagnose then work on it. Example: tailscope runs import result.json --from vllm"""
    from tailscope.api.peers import import_run
    from tailscope.cli.common import store_path, write_export
    from tailscope.metrics.document import clean_json
    from tailscope.report.console import stdout_console
    from tailscope.report.peers_console import print_imported

    result = import_run(path, tool=tool, store=store_path(db), tag=tag)
    print_imported(stdout_console(), result.runs)
    if json_out is not None:
        write_export(json_out, clean_json(result.export()))
    err_console().print(f"stored in {result.store_path}: tailscope runs show {result.runs[-1].run.id}")


@runs_app.command("export")
def export(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, latest or latest:TAG."),
    fmt: str = typer.Option("json", "--format", help="parquet, csv or json."),
    out: Path = typer.Option(..., "--out", help="Output file."),
    db: opt.Db = None,
) -> None:
    """Export a run's records. Example: tailscope runs export latest --format parquet --out run.parquet"""
    from tailscope.api.runs import export_run

    err_console().print(f"wrote {export_run(run_id, out, fmt=fmt, store=db)}")


@runs_app.command("tag")
def tag(
    run_id: str = typer.Argument(..., help="Run id, unique prefix or latest."),
    name: str = typer.Argument(..., help="Tag name, e.g. main (baselines are found as latest:main)."),
    db: opt.Db = None,
) -> None:
    """Tag a run (tags name baselines). Example: tailscope runs tag latest main"""
    from tailscope.api.runs import tag_run

    typer.echo(f"tagged {tag_run(run_id, name, store=db)} as {name}")


@runs_app.command("delete")
def delete(
    run_ids: list[str] = typer.Argument(..., help="Run ids, unique prefixes, latest or latest:TAG."),
    db: opt.Db = None,
) -> None:
    """Delete runs with their records, samples, tags and leftovers. Example: tailscope runs delete 20261129-0800"""
    from tailscope.api.runs import delete_runs

    deleted = delete_runs(run_ids, store=db)
    typer.echo(f"deleted {len(deleted)} run(s): " + ", ".join(deleted))


@runs_app.command("repair")
def repair(db: opt.Db = None) -> None:
    """Fold records of crashed runs into the store, mark them incomplete, list quarantined batches.

    Example: tailscope runs repair
    """
    from tailscope.api.runs import repair_store
    from tailscope.report.console import stdout_console
    from tailscope.report.runs_console import print_repaired

    print_repaired(repair_store(store=db), stdout_console())
