"""``tailscope alerts``: Prometheus alerting + recording rules (and a Grafana dashboard) from a contract."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import command_app

_HELP = """Generate Prometheus recording and alerting rules from a contract: P99 TTFT/E2E from the engine's histograms,
error ratio, queue waiting, KV usage, preemptions and engine-down — each with for:, a severity label and a runbook
annotation holding the diagnosis checklist. Check the output with `promtool check rules`.

Examples:

  tailscope alerts contract.yaml --out rules.yaml

  tailscope alerts contract.yaml --out rules.yaml --grafana dashboard.json --for 2m --selector 'job="vllm"'
"""


def alerts(
    contract: Path = typer.Argument(..., help="Contract YAML (see docs/gates.md)."),
    out: Path = typer.Option(..., "--out", "-o", help="Write the Prometheus rule file here ('-' = stdout)."),
    grafana: Path | None = typer.Option(None, "--grafana", help="Also write a Grafana dashboard JSON here."),
    for_: str = typer.Option("5m", "--for", help="How long a condition must hold before an alert fires."),
    window: str = typer.Option("5m", "--window", help="Rate window of quantiles and ratios."),
    selector: str = typer.Option("", "--selector", help='Label matchers for engine metrics, e.g. job="vllm".'),
    queue_limit: float = typer.Option(
        0.0, "--queue-limit", help="Backlog alert: the queue stayed above this all window."
    ),
    kv_limit: float = typer.Option(0.9, "--kv-limit", help="KV-cache usage (0-1) that counts as near full."),
) -> None:
    import json
    import re

    from tailscope.cli.gate import load_contract_file
    from tailscope.errors import ConfigError
    from tailscope.verify.alerts import AlertOptions, alert_rules
    from tailscope.verify.grafana import dashboard

    duration = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
    for flag, value in (("--for", for_), ("--window", window)):
        if not duration.match(value):
            raise ConfigError(f"{flag} {value!r}: expected a Prometheus duration like 30s, 5m or 1h")
    matcher = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'
    if selector.strip() and not re.fullmatch(f"{matcher}(,{matcher})*,?", selector):
        raise ConfigError(f'--selector {selector!r}: expected label matchers like job="vllm",namespace=~"prod.*"')
    if not 0 < kv_limit <= 1:
        raise ConfigError(f"--kv-limit must be in (0, 1] (got {kv_limit})")
    spec = load_contract_file(contract)
    rules = alert_rules(
        spec, AlertOptions(for_=for_, window=window, selector=selector, queue_limit=queue_limit, kv_limit=kv_limit)
    )
    text = rules.to_yaml()
    if str(out) == "-":
        typer.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        typer.echo(
            f"wrote {out}: {len(rules.record_names)} recording rules, {len(rules.alert_names)} alerts "
            f"({', '.join(rules.alert_names)})",
            err=True,
        )
    for note in rules.skipped:
        typer.echo(f"not alerted: {note}", err=True)
    if grafana is not None:
        grafana.parent.mkdir(parents=True, exist_ok=True)
        grafana.write_text(json.dumps(dashboard(spec), indent=2) + "\n", encoding="utf-8")
        typer.echo(f"wrote {grafana}", err=True)


app = command_app()
app.command("alerts", help=_HELP)(alerts)
