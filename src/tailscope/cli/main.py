"""The ``tailscope`` command: a thin typer front end over the library (:mod:`tailscope`).

Commands are loaded lazily: :data:`COMMANDS` names each command's module and one-line help, so ``tailscope --help``
imports no command module at all, and ``tailscope bench`` imports only ``tailscope.cli.bench`` (which may import the
library at its top). Each command module defines ``app``, a :class:`typer.Typer` with its command(s).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

#: command → (module, one-line help shown by ``tailscope --help``). Order = order in ``--help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("tailscope.cli.bench", "Load-test an endpoint: TTFT, TPOT, ITL, E2E percentiles, throughput, goodput."),
    "runs": ("tailscope.cli.runs", "Runs kept in the embedded store."),
    "translate": ("tailscope.cli.translate", "Turn a vLLM bench, GuideLLM or AIPerf command line into a profile."),
    "plan": ("tailscope.cli.plan", "Capacity and cost planning: KV memory, latency estimates, GPUs, budgets."),
    "calibrate": ("tailscope.cli.twin", "Probe a server (bounded) and fit its digital twin; or fit one from runs."),
    "twin": ("tailscope.cli.twin", "The calibrated digital twin."),
    "serve": ("tailscope.cli.serve", "Run the built-in simulated engine behind an OpenAI-compatible HTTP server."),
    "app": ("tailscope.cli.app", "Run the reference AI application (gateway, retrieval, agent, model, DB) to trace."),
    "sim": ("tailscope.cli.sim", "Simulate a deployment in virtual time: latency, throughput, KV cache, queueing."),
    "catalog": ("tailscope.cli.catalog", "The model and GPU catalogs the engine model uses."),
    "trace": ("tailscope.cli.trace", "Latency is a tree: critical paths, layers, waterfalls and diffs of traces."),
    "gate": ("tailscope.cli.gate", "Check a run against a performance contract; the exit code fails a CI build."),
    "drill": ("tailscope.cli.drill", "Degradation drill: load, a fault on for a while, windows before/during/after."),
    "proxy": ("tailscope.cli.proxy", "Fault-injecting proxy (latency, errors, resets, stalls) with a live admin API."),
    "compare": ("tailscope.cli.compare", "Compare runs: which differences are real (bootstrap intervals)."),
    "diagnose": ("tailscope.cli.diagnose", "Turn a run's numbers into findings: symptom, evidence, cause, actions."),
    "alerts": ("tailscope.cli.alerts", "Generate Prometheus alert rules (and a Grafana dashboard) from a contract."),
    "checklist": ("tailscope.cli.checklist", "The pre-launch checklist: each item evidenced by the store or missing."),
    "report": ("tailscope.cli.report", "Write a self-contained HTML report of runs or a trace set."),
    "ui": ("tailscope.cli.ui", "A local dashboard of the store's runs and trace sets."),
    "mcp": ("tailscope.cli.mcp", "Serve tailscope as Model Context Protocol tools over stdio (for agents)."),
}


class LazyGroup(TyperGroup):
    """A command group that imports a command's module only when that command runs (or shows its help)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command = typer.main.get_command(getattr(module, _app_name(cmd_name, module)))
        command.name = cmd_name
        return command

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from tailscope.cli.plain_coercion import install  # --debug, --version, --help: no pydantic validators

        install(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, short) for name, (_module, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _app_name(cmd_name: str, module: Any) -> str:
    """The Typer object of a command in its module: ``<name>_app`` when the module holds several, else ``app``."""
    specific = f"{cmd_name}_app"
    return specific if hasattr(module, specific) else "app"


app = typer.Typer(
    name="tailscope",
    cls=LazyGroup,
    help=(
        "Performance engineering for LLM and agent systems: measure → locate → plan → verify.\n\n"
        "Example: tailscope bench --requests 200 --concurrency 8   (no --url: runs against the built-in engine)"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from tailscope import __version__

        print(f"tailscope {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    if debug:
        os.environ["TAILSCOPE_DEBUG"] = "1"


def _click_exception_types() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(usage-error types, exit types) of click and of the click that newer typer releases vendor as
    ``typer._click`` (typer ≥ 0.20 raises its own copies, which are not ``click.ClickException``)."""
    usage: list[type[BaseException]] = []
    leave: list[type[BaseException]] = []
    for module_name in ("click.exceptions", "typer._click.exceptions"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, into in (("ClickException", usage), ("Exit", leave)):
            kind = getattr(module, name, None)
            if isinstance(kind, type) and issubclass(kind, BaseException):
                into.append(kind)
    return tuple(usage), tuple(leave)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning a TailscopeError into one line and its exit code."""
    from tailscope.errors import TailscopeError

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
