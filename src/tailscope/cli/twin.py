"""``tailscope calibrate`` and ``tailscope twin check``: fit a digital twin of a real deployment and prove it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import CALIBRATE, TWIN_CHECK, pick
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, with_flags
from tailscope.errors import TailscopeError

twin_app = command_app(
    help=(
        "The calibrated digital twin.\n\n"
        "Example: tailscope twin check --calibration twin.yaml --url http://127.0.0.1:8000 --rate 2 --requests 60"
    ),
    no_args_is_help=True,
)


@twin_app.callback()
def _twin_group() -> None:
    """The calibrated digital twin (a group, so that ``twin check`` stays a subcommand while it is the only one)."""


@with_flags(CALIBRATE.values())  # the options of tailscope.calibrate (api/_flags.py)
def calibrate(db: opt.Db = None, **options: Any) -> None:
    """Probe a server (bounded) and fit its digital twin; or fit one from stored runs.

    Examples:

      tailscope calibrate --url http://127.0.0.1:8000 --model tiny --out twin.yaml

      tailscope calibrate --from-runs RUN_A --from-runs RUN_B --url http://127.0.0.1:8000 --out twin.yaml
    """
    from tailscope.api.twin import calibrate as fit
    from tailscope.cli.common import err_console, store_path
    from tailscope.report.console import stdout_console
    from tailscope.report.twin_console import print_twin

    err = err_console()
    result = fit(**options, store=store_path(db), on_phase=lambda name: err.print(f"probe: {name}"))
    print_twin(stdout_console(), result.twin, result.path, result.notes)


@twin_app.command("check")
@with_flags([*pick("profile rate concurrency stagger arrival requests duration input_tokens output_tokens",
                  output_tokens={"default": "64"}), *TWIN_CHECK.values()])  # fmt: skip
def check(
    calibration: Path = typer.Option(..., "--calibration", help="The twin file."),
    url: str = typer.Option(..., "--url", help="The real server to measure."),
    json_out: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the check as JSON to PATH (- = stdout, the table to stderr)."
    ),
    html_out: Path | None = typer.Option(None, "--html", help="Write predicted vs measured as an HTML report."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """Predict a workload with the twin, measure it on the server, compare; exit 1 beyond --tolerance.

    Example: tailscope twin check --calibration twin.yaml --url http://127.0.0.1:8000 --rate 3 --requests 60
    """

    from tailscope.api.twin import twin_check
    from tailscope.cli.common import emit_json, err_console, store_path, write_report_html
    from tailscope.files import to_stdout
    from tailscope.report.console import stdout_console
    from tailscope.report.twin_console import print_twin_check

    err = err_console()
    result = twin_check(calibration, url, **options, store=store_path(db), on_phase=err.print)
    print_twin_check(err if to_stdout(json_out) else stdout_console(), result.report)
    emit_json(result.report, json_out)
    if html_out is not None:
        write_report_html(html_out, [result.measured[-1], result.prediction])
    if not result.passed:
        raise TailscopeError(f"the twin missed by more than {options['tolerance']:.0%} on {', '.join(result.failed)}")


calibrate_app = command_app()
calibrate_app.command("calibrate")(calibrate)
