"""``tailscope report``: self-contained HTML reports of runs, comparisons, sweeps and trace sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import REPORT
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, with_flags

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


@with_flags(REPORT.values())  # the options of tailscope.write_report (api/_flags.py)
def report(
    runs: list[str] = typer.Argument(
        None, help="Run ids, prefixes, latest, latest:TAG or export.json files (two or more: a comparison)."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    from tailscope.api.report import write_report

    options["traces"] = options["traces"] or None
    path = write_report(out, runs or None, **options, store=db)
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


app = command_app()
app.command("report", help=_HELP)(report)
