"""The ``tailscope`` command: a thin typer app.

Each command lives in its own module under ``tailscope.cli`` and registers itself on :data:`app`. Command modules
import only typer and the standard library at the top; the library (numpy, aiohttp, duckdb, …) is imported inside
the command functions so that ``tailscope --help`` starts fast.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

app = typer.Typer(
    name="tailscope",
    help=(
        "Performance engineering for LLM and agent systems: measure → locate → plan → verify.\n\n"
        "Example: tailscope bench --requests 200 --concurrency 8   (no --url: runs against the built-in engine)"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

#: Command modules, each with a ``register(app)`` function. Order = order in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "tailscope.cli.bench",
    "tailscope.cli.runs",
    "tailscope.cli.plan",
    "tailscope.cli.calibrate",
    "tailscope.cli.serve",
    "tailscope.cli.sim",
    "tailscope.cli.catalog",
    "tailscope.cli.trace",
    "tailscope.cli.gate",
    "tailscope.cli.compare",
    "tailscope.cli.diagnose",
    "tailscope.cli.alerts",
    "tailscope.cli.report",
    "tailscope.cli.ui",
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(app)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
) -> None:
    if debug:
        os.environ["TAILSCOPE_DEBUG"] = "1"


def _click_exception_types() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(usage-error types, exit types) of click and of the click that newer typer releases vendor as
    ``typer._click`` (typer ≥ 0.20 raises its own copies, which are not ``click.ClickException``)."""
    import click

    usage: list[type[BaseException]] = [click.exceptions.ClickException]
    leave: list[type[BaseException]] = [click.exceptions.Exit]
    try:
        vendored = importlib.import_module("typer._click.exceptions")
    except ImportError:
        return tuple(usage), tuple(leave)
    for name, into in (("ClickException", usage), ("Exit", leave)):
        kind = getattr(vendored, name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            into.append(kind)
    return tuple(usage), tuple(leave)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning a TailscopeError into one line and its exit code."""
    from tailscope.errors import TailscopeError

    _register_all()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or os.environ.get("TAILSCOPE_DEBUG") == "1"
    try:
        code = app(args=argv, standalone_mode=False, prog_name="tailscope")
    except TailscopeError as exc:
        if debug:
            raise
        print(f"tailscope: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("tailscope: aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("tailscope: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors and others
        usage, leave = _click_exception_types()
        if isinstance(exc, usage):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if isinstance(exc, leave):
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        raise
    # with standalone_mode=False click returns the code of a typer.Exit instead of exiting
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
