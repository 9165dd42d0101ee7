"""``tailscope report``: self-contained HTML reports of runs, comparisons, sweeps and trace sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.cli.common import command_app

_HELP = """Write a self-contained HTML report (one file, works offline): one run, or a comparison of several (the first
is the reference; significant differences are marked), sweep curves for runs of one sweep, or a trace set's analysis.

Examples:

  tailscope report latest --out report.html

  tailscope report latest:main latest --out compare.html

  tailscope report out.json --out report.html               (a `bench --json` export, no store needed)

  tailscope report --sweep SWEEP_ID --out sweep.html

  tailscope report --traces prod --out traces.html          (add a second --traces SET for a diff)
"""


def _load(ref: str, store: Any) -> Any:
    """A run from the store, or from a ``--json`` export file (``ref`` ending in .json or naming a file)."""
    from tailscope.api.verify import is_export_ref
    from tailscope.report.dashboard import load_report_run

    if not is_export_ref(ref):
        return load_report_run(store, ref)
    import json

    from tailscope.errors import ConfigError
    from tailscope.metrics.summary import summarize
    from tailscope.report.html import ReportRun
    from tailscope.verify.rundata import run_from_export

    try:
        doc = json.loads(Path(ref).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{ref}: cannot read the export ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{ref}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    data = run_from_export(doc, source=ref)
    summary = dict(data.summary) if data.summary else summarize(data.records).to_dict()
    run = dict(doc.get("run") or {"id": data.id, "kind": data.kind})
    return ReportRun(run, summary, data.records, data.samples)


def report(
    runs: list[str] = typer.Argument(
        None, help="Run ids, prefixes, latest, latest:TAG or export.json files (two or more: a comparison)."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    sweep: str | None = typer.Option(None, "--sweep", help="Compare every run of this sweep id, by load."),
    traces: list[str] = typer.Option(None, "--traces", help="Trace set name (twice: diff of before and after)."),
    resamples: int = typer.Option(1000, "--resamples", help="Bootstrap resamples for comparison intervals."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
) -> None:
    from tailscope.errors import ConfigError
    from tailscope.report.html import render_compare_report, render_run_report, write_html
    from tailscope.store.runs import RunStore

    refs = list(runs or [])
    sets = list(traces or [])
    if sum(bool(x) for x in (refs, sweep, sets)) != 1:
        raise ConfigError("report: give run ids, or --sweep SWEEP_ID, or --traces SET (one of them)")
    if resamples < 100:
        raise ConfigError(f"--resamples must be ≥ 100 (got {resamples})")
    if sets:
        from tailscope.report.html_traces import render_trace_report
        from tailscope.store.db import Database

        if len(sets) > 2:
            raise ConfigError("--traces: give one set (analysis) or two (before, after) for a diff")
        html = render_trace_report(Database(db), sets[0], sets[1] if len(sets) == 2 else None)
    else:
        store = RunStore(db)
        if sweep:
            ids = [s.run.id for s in store.list_runs(limit=10_000) if s.run.sweep_id == sweep]
            if len(ids) < 2:
                raise ConfigError(f"--sweep {sweep!r}: found {len(ids)} runs of that sweep; see `tailscope runs list`")
            refs = list(reversed(ids))  # oldest first
        items = [_load(ref, store) for ref in refs]
        if len(items) == 1:
            html = render_run_report(items[0])
        else:
            html = render_compare_report(items, resamples=resamples, seed=seed)
    path = write_html(out, html)
    typer.echo(f"wrote {path} ({len(html.encode('utf-8')) / 1e6:.2f} MB)")


app = command_app()
app.command("report", help=_HELP)(report)
