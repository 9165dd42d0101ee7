"""``tailscope diagnose``: turn a run's numbers into findings — symptom, evidence, likely cause, next actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.cli.common import command_app

_HELP = """Diagnose a run: saturation, prefill-bound TTFT, prefix-cache misses, KV pressure, prefill interference,
long-output tails, stalls, client bottleneck, rate limiting and error bursts, cold start, and (with --traces)
engineering layers, waterfalls and retries on the critical path. Findings are ordered by impact.

Examples:

  tailscope diagnose latest

  tailscope diagnose out.json --traces prod-traces --json
"""


def _trace_analysis(ref: str, db: Path | None) -> dict[str, Any]:
    """A trace analysis dict: from a `trace analyze --json` file, or computed from a stored trace set."""
    import json

    from tailscope.errors import ContractError

    path = Path(ref)
    if ref.endswith(".json") or path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ContractError(f"{ref}: cannot read the trace analysis ({exc})") from None
        if not isinstance(doc, dict):
            raise ContractError(f"{ref}: expected the JSON object written by `tailscope trace analyze --json`")
        return doc
    from tailscope.store.spans import SpanStore
    from tailscope.trace.analysis import analyze_facts
    from tailscope.trace.ingest.sets import set_facts

    return analyze_facts(set_facts(SpanStore(db), ref))


def diagnose(
    run: str = typer.Argument("latest", help="latest, a run id (or prefix), latest:TAG, or an export.json."),
    traces: str | None = typer.Option(
        None, "--traces", help="Trace set name, or a `trace analyze --json` file, for the critical-path rules."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
) -> None:
    import json

    from tailscope.cli.gate import load_run_data
    from tailscope.verify.diagnose import diagnose as run_rules
    from tailscope.verify.diagnose import render_findings_text

    data = load_run_data(run, db)
    trace = _trace_analysis(traces, db) if traces else None
    findings = run_rules(data.records, data.samples, trace=trace, settings=data.settings)
    if json_out:
        doc = {"run": data.id, "findings": [f.to_dict() for f in findings]}
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render_findings_text(findings, data.id), nl=False)


app = command_app()
app.command("diagnose", help=_HELP)(diagnose)
