"""``tailscope compare``: which differences between runs are real (bootstrap intervals on every percentile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import COMPARE
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, json_or_render, json_path_option, with_flags, write_text

_HELP = """Compare runs against the first one: per metric and percentile, the change, its confidence interval and a
significance mark (* when the interval excludes zero). Works on bench, sim and trace runs and on export files alike.

Examples:

  tailscope compare latest:main latest

  tailscope compare RUN_A RUN_B RUN_C --metrics ttft_ms,tpot_ms --json -

  tailscope compare RUN_A RUN_B --gpu-price 2.5 --gpus 1   # also each run's $ per 1M output tokens
"""


@with_flags(COMPARE.values())  # the options of tailscope.compare (api/_flags.py)
def compare(
    runs: list[str] = typer.Argument(..., help="Two or more runs: ids, prefixes, latest, latest:TAG or export.json."),
    json_out: Path | None = json_path_option("the comparison"),
    markdown: Path | None = typer.Option(None, "--markdown", help="Also write the table as markdown here."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    from tailscope.api.verify import compare as run_compare
    from tailscope.report.verify import compare_markdown, compare_text

    result = run_compare(runs, **options, store=db)
    json_or_render(result.to_dict(), json_out, lambda: typer.echo(compare_text(result), nl=False))
    if markdown is not None:
        write_text(markdown, compare_markdown(result), "--markdown")


app = command_app()
app.command("compare", help=_HELP)(compare)
