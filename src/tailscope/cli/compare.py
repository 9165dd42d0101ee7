"""``tailscope compare``: which differences between runs are real (bootstrap intervals on every percentile)."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import command_app

_HELP = """Compare runs against the first one: per metric and percentile, the change, its confidence interval and a
significance mark (* when the interval excludes zero). Works on bench, sim and trace runs and on export files alike.

Examples:

  tailscope compare latest:main latest

  tailscope compare RUN_A RUN_B RUN_C --metrics ttft_ms,tpot_ms --json
"""


def compare(
    runs: list[str] = typer.Argument(..., help="Two or more runs: ids, prefixes, latest, latest:TAG or export.json."),
    metrics: str | None = typer.Option(
        None, "--metrics", help="Comma-separated: ttft_ms,tpot_ms,itl_ms,e2e_ms,output_tokens_per_s,error_rate,…"
    ),
    percentiles: str = typer.Option("p50,p90,p99", "--percentiles", help="Statistics for latency metrics."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the intervals."),
    resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Also write the table as markdown here."),
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
) -> None:
    import json

    import numpy as np

    from tailscope.cli.gate import load_run_data
    from tailscope.errors import ConfigError
    from tailscope.verify.compare import compare_runs, parse_metrics, render_compare_markdown, render_compare_text
    from tailscope.verify.contract import canonical_percentile

    if len(runs) < 2:
        raise ConfigError("compare needs at least two runs (e.g. `tailscope compare latest:main latest`)")
    if not 0.5 < confidence < 1.0:
        raise ConfigError(f"--confidence must be between 0.5 and 1 (got {confidence})")
    if resamples < 100:
        raise ConfigError(f"--resamples must be ≥ 100 (got {resamples})")
    try:
        names = parse_metrics(metrics)
        stats = tuple(canonical_percentile(p.strip()) for p in percentiles.split(",") if p.strip())
    except ValueError as exc:
        raise ConfigError(f"--metrics/--percentiles: {exc}") from None
    data = [load_run_data(ref, db) for ref in runs]
    result = compare_runs(
        data,
        metrics=names,
        stats=stats,
        confidence=confidence,
        resamples=resamples,
        rng=np.random.default_rng(seed),
    )
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        typer.echo(render_compare_text(result), nl=False)
    if markdown is not None:
        try:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(render_compare_markdown(result), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--markdown {markdown}: cannot write it ({exc.strerror or exc})") from None


app = command_app()
app.command("compare", help=_HELP)(compare)
