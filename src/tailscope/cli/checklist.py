"""``tailscope checklist``: the method's pre-launch checklist, each item evidenced by the store, attested, or missing.

Parse → :func:`tailscope.checklist` → render. Exit code 1 while any item is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import CHECKLIST
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, json_or_render, json_path_option, with_flags

_HELP = """The pre-launch checklist of the method (12 items): each shown as evidenced by the store (three baseline
runs, a contract, alert rules generated, a drill passed, 20 % capacity headroom, instrumentation), attested by a
person (--attest ID: emergency_plan, canary, logging, security, compliance, on_call), or missing. Exit code 1 while
any item is missing. docs/gates.md lists what counts as evidence for each item.

Examples:

  tailscope checklist --contract contract.yaml --alerts rules.yaml --target-rps 20

  tailscope checklist --contract contract.yaml --attest on_call --attest canary --json
"""


@with_flags(CHECKLIST.values())  # the options of tailscope.checklist (api/_flags.py)
def checklist(json_out: Path | None = json_path_option("the checklist"), db: opt.Db = None, **options: Any) -> None:
    from tailscope.api.checklist import checklist as run_checklist
    from tailscope.report.verify import checklist_text

    result = run_checklist(**options, store=db)
    json_or_render(result.to_dict(), json_out, lambda: typer.echo(checklist_text(result)))
    raise typer.Exit(result.exit_code)


app = command_app()
app.command("checklist", help=_HELP)(checklist)
