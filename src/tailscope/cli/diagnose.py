"""``tailscope diagnose``: turn a run's numbers into findings — symptom, evidence, likely cause, next actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import DIAGNOSE
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, json_or_render, json_path_option, with_flags

_HELP = """Diagnose a run: saturation, prefill-bound TTFT, prefix-cache misses, KV pressure, prefill interference,
long-output tails, stalls, client bottleneck, rate limiting and error bursts, cold start, and (with --traces)
engineering layers, waterfalls and retries on the critical path. Findings are ordered by impact.

Then the method's troubleshooting trees: TTFT high, TPOT high, stuttering, OOM under concurrency, P99 >> P50,
throughput ceiling, smaller model slower, cost spike — each check with a verdict from this run's evidence.

Examples:

  tailscope diagnose latest

  tailscope diagnose out.json --traces prod-traces --json -

  tailscope diagnose latest --baseline latest:big-model --all-trees
"""


@with_flags(DIAGNOSE.values())  # the options of tailscope.diagnose (api/_flags.py)
def diagnose(
    run: str = typer.Argument("latest", help="latest, a run id (or prefix), latest:TAG, or an export.json."),
    all_trees: bool = typer.Option(
        False, "--all-trees", help="Show every troubleshooting tree, not only the symptoms the run shows."
    ),
    json_out: Path | None = json_path_option("the findings and the walked trees"),
    db: opt.Db = None,
    **options: Any,
) -> None:
    from tailscope.api.verify import diagnose as run_diagnose
    from tailscope.report.verify import findings_text

    diagnosis = run_diagnose(run, **options, store=db)
    json_or_render(
        diagnosis.to_dict(), json_out, lambda: typer.echo(findings_text(diagnosis, all_trees=all_trees), nl=False)
    )


app = command_app()
app.command("diagnose", help=_HELP)(diagnose)
