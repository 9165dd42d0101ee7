"""``tailscope catalog``: the built-in models and GPUs with their numbers and sources."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from tailscope.cli.common import command_app

_EXAMPLES = """
Examples:

  tailscope catalog models

  tailscope catalog gpus --gpu-file my-gpus.yaml
"""


def catalog(
    what: str = typer.Argument(..., help="models or gpus"),
    gpu_file: Path | None = typer.Option(None, "--gpu-file", help="YAML file with extra GPUs (listed too)."),
    sources: bool = typer.Option(True, "--sources/--no-sources", help="Show where each number comes from."),
) -> None:
    """List the model or GPU catalog used by sim, serve and plan."""
    import sys

    from rich.console import Console

    from tailscope.api.catalog import catalog_gpus, catalog_models
    from tailscope.errors import ConfigError
    from tailscope.report.catalog_console import gpus_table, models_table

    # piped output (files, tests, grep) gets wide lines instead of wrapped ids
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 240)
    if what == "models":
        console.print(models_table(catalog_models(), sources=sources))
    elif what == "gpus":
        console.print(gpus_table(catalog_gpus(gpu_file=gpu_file), sources=sources))
    else:
        raise ConfigError(f"catalog {what!r}: use 'models' or 'gpus'")


app = command_app()
app.command("catalog", help=(inspect.getdoc(catalog) or "") + "\n" + _EXAMPLES)(catalog)
