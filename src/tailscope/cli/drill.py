"""``tailscope drill DRILL.yaml``: a degradation drill — bounded load, a fault on for a while, windows before, during
and after, expectations judged; the exit code fails a CI build like ``gate``."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app, verbatim

_HELP = """Run a degradation drill: a bounded load against the target, a fault switched on at fault.at_s for fault.for_s
(the app's llm-down, llm-slow, retrieval-down, db-slow, or a tailscope proxy rule), error rate and latency measured in
the windows before, during and after, and the expectations checked (see docs/drills.md).

Exit code: 0 every expectation holds, 1 one does not, 2 invalid drill file or target not reachable.

Examples:

  tailscope app --time-scale 0.1 --fix all &
  tailscope drill examples/drills/llm-down.yaml

  tailscope drill llm-down.yaml --url http://127.0.0.1:8080 --junit drill.xml --markdown drill.md
"""


def drill_command(
    drill_file: Path = typer.Argument(..., help="Drill YAML (name, target, load, fault, expect)."),
    url: str | None = typer.Option(None, "--url", help="Target URL instead of the file's target.url."),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per expectation)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write a markdown summary here."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON here ('-' = stdout)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the load."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not keep the drill's run in the store."),
    quiet: opt.Quiet = False,
    db: opt.Db = None,
) -> None:
    from tailscope.api.drill import drill
    from tailscope.cli.common import MissingInput, emit_json, err_console, store_path, write_text
    from tailscope.errors import ConfigError, TargetError
    from tailscope.files import to_stdout
    from tailscope.io.drill import load_drill
    from tailscope.report.drill import drill_junit, drill_markdown, drill_text
    from tailscope.report.live import live_progress
    from tailscope.runner.progress import Progress

    try:
        spec = load_drill(drill_file)
        progress = Progress()
        with live_progress(progress, quiet=quiet, console=err_console()):
            result = drill(spec, url=url, seed=seed, store=None if no_store else store_path(db), progress=progress)
    except (ConfigError, TargetError) as exc:  # invalid input or no target: 2, as gate's missing data
        raise MissingInput(str(exc)) from None
    doc = result.to_dict()
    json_stdout = to_stdout(json_out)
    typer.echo(drill_text(doc), nl=False, err=json_stdout)
    if junit is not None:
        write_text(junit, drill_junit(doc), "--junit")
    if markdown is not None:
        write_text(markdown, drill_markdown(doc), "--markdown")
    emit_json(doc, json_out)
    raise typer.Exit(result.exit_code)


app = command_app()
app.command("drill", help=verbatim(_HELP))(drill_command)
