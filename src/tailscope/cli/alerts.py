"""``tailscope alerts``: Prometheus alerting + recording rules (and a Grafana dashboard) from a contract."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tailscope.cli.common import command_app, write_text

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


def alerts(
    contract: Path | None = typer.Argument(None, help="Contract YAML (see docs/gates.md); optional with --golden."),
    out: Path = typer.Option(..., "--out", "-o", help="Write the Prometheus rule file here ('-' = stdout)."),
    grafana: Path | None = typer.Option(None, "--grafana", help="Also write a Grafana dashboard JSON here."),
    for_: str = typer.Option("5m", "--for", help="How long a condition must hold before an alert fires."),
    window: str = typer.Option("5m", "--window", help="Rate window of quantiles and ratios."),
    selector: str = typer.Option("", "--selector", help='Label matchers for engine metrics, e.g. job="vllm".'),
    queue_limit: float = typer.Option(
        0.0, "--queue-limit", help="Backlog alert: the queue stayed above this all window."
    ),
    kv_limit: float = typer.Option(0.9, "--kv-limit", help="KV-cache usage (0-1) that counts as near full."),
    golden: bool = typer.Option(
        False, "--golden", help="Add the method's five golden alerts (alone without a contract)."
    ),
    layer_metric: list[str] = typer.Option(
        [], "--layer-metric", help="LAYER=HISTOGRAM of the layer's durations in seconds (repeatable)."
    ),
    oom_metric: str = typer.Option(
        "llm_out_of_memory_errors_total", "--oom-metric", help="Counter of OOM errors (golden OOM alert)."
    ),
) -> None:
    from tailscope.api.verify import alerts as make_alerts

    rules = make_alerts(contract, for_=for_, window=window, selector=selector, queue_limit=queue_limit,
                        kv_limit=kv_limit, golden=golden, layer_metrics=layer_metric,
                        oom_metric=oom_metric)  # fmt: skip
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
