"""``tailscope report``: self-contained HTML reports of runs, comparisons, sweeps and trace sets."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app

_HELP = """Write a self-contained HTML report (one file, works offline): one run, or a comparison of several (the first
is the reference; significant differences are marked), sweep curves for runs of one sweep, or a trace set's analysis.

Examples:

  tailscope report latest --out report.html

  tailscope report latest:main latest --out compare.html

  tailscope report out.json --out report.html               (a `bench --json` export, no store needed)

  tailscope report --sweep SWEEP_ID --out sweep.html

  tailscope report --traces prod --out traces.html          (add a second --traces SET for a diff)

  tailscope report latest --traces live --out run.html      (the run joined with a set: its client and tree)
"""


def report(
    runs: list[str] = typer.Argument(
        None, help="Run ids, prefixes, latest, latest:TAG or export.json files (two or more: a comparison)."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    sweep: str | None = typer.Option(None, "--sweep", help="Compare every run of this sweep id, by load."),
    traces: list[str] = typer.Option(
        None,
        "--traces",
        help="Trace set name (twice: diff of before and after; with one run: the run joined with the set).",
    ),
    trace_db: Path | None = typer.Option(
        None, "--trace-db", help="Store holding the set joined with a run, if not --db."
    ),
    resamples: int = typer.Option(1000, "--resamples", help="Bootstrap resamples for comparison intervals."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    db: opt.Db = None,
) -> None:
    from tailscope.api.report import write_report

    path = write_report(
        out, runs or None, sweep=sweep, traces=traces or None, store=db, resamples=resamples, seed=seed,
        trace_store=trace_db,
    )  # fmt: skip
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


app = command_app()
app.command("report", help=_HELP)(report)
