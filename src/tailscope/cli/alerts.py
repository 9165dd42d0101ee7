"""``tailscope alerts``: Prometheus alerting + recording rules (and a Grafana dashboard) from a contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import ALERTS
from tailscope.cli.common import command_app, with_flags, write_text

_HELP = """Generate Prometheus recording and alerting rules from a contract: P99 TTFT/E2E from the engine's histograms,
error ratio, queue waiting, KV usage, preemptions and engine-down — each with for:, a severity label and a runbook
annotation holding the diagnosis checklist. Check the output with `promtool check rules`.

Examples:

  tailscope alerts contract.yaml --out rules.yaml

  tailscope alerts contract.yaml --out rules.yaml --grafana dashboard.json --for 2m --selector 'job="vllm"'

  tailscope alerts --golden --out golden.rules.yaml   # the method's five golden alerts, each with its runbook

An SLO's own `for:` and `severity:` in the contract override --for and the default severity. Every SLO that cannot
become a rule is listed ("not alerted: …") with the reason.
"""


@with_flags(ALERTS.values())  # the options of tailscope.alerts (api/_flags.py)
def alerts(
    contract: Path | None = typer.Argument(None, help="Contract YAML (see docs/gates.md); optional with --golden."),
    out: Path = typer.Option(..., "--out", "-o", help="Write the Prometheus rule file here ('-' = stdout)."),
    grafana: Path | None = typer.Option(None, "--grafana", help="Also write a Grafana dashboard JSON here."),
    **options: Any,
) -> None:
    from tailscope.api.verify import alerts as make_alerts

    rules = make_alerts(contract, **options)
    text = rules.to_yaml()
    if str(out) == "-":
        typer.echo(text, nl=False)
    else:
        write_text(out, text, "--out")
        typer.echo(
            f"wrote {out}: {len(rules.record_names)} recording rules, {len(rules.alert_names)} alerts "
            f"({', '.join(rules.alert_names)})",
            err=True,
        )
    for note in rules.skipped:
        typer.echo(f"not alerted: {note}", err=True)
    if grafana is not None:
        write_text(grafana, json.dumps(rules.grafana, indent=2) + "\n", "--grafana")
        typer.echo(f"wrote {grafana}", err=True)


app = command_app()
app.command("alerts", help=_HELP)(alerts)
