"""``tailscope diagnose``: turn a run's numbers into findings — symptom, evidence, likely cause, next actions."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tailscope.cli.common import DB, command_app

_HELP = """Diagnose a run: saturation, prefill-bound TTFT, prefix-cache misses, KV pressure, prefill interference,
long-output tails, stalls, client bottleneck, rate limiting and error bursts, cold start, and (with --traces)
engineering layers, waterfalls and retries on the critical path. Findings are ordered by impact.

Examples:

  tailscope diagnose latest

  tailscope diagnose out.json --traces prod-traces --json
"""


def diagnose(
    run: str = typer.Argument("latest", help="latest, a run id (or prefix), latest:TAG, or an export.json."),
    traces: str | None = typer.Option(
        None, "--traces", help="Trace set name, or a `trace analyze --json` file, for the critical-path rules."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    db: Path | None = DB,
) -> None:
    from tailscope.api.verify import diagnose as run_diagnose
    from tailscope.report.verify import findings_text

    diagnosis = run_diagnose(run, traces=traces, store=db)
    if json_out:
        typer.echo(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        typer.echo(findings_text(diagnosis), nl=False)


app = command_app()
app.command("diagnose", help=_HELP)(diagnose)
