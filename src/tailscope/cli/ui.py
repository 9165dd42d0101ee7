"""``tailscope ui``: the local read-only dashboard over the store."""

from __future__ import annotations

import sys

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app

_HELP = """Serve a local dashboard over the store: runs with filters (kind, tag, text), a page per run (the HTML
report), comparisons of two or more runs, and trace sets. Read-only; binds 127.0.0.1 unless --host says otherwise.

Examples:

  tailscope ui                      (then open http://127.0.0.1:8787/)

  tailscope ui --port 9000 --token s3cret
"""


def ui(
    port: int = typer.Option(8787, "--port", help="TCP port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (anything but loopback exposes your runs)."),
    token: str | None = typer.Option(None, "--token", help="Require this token (?token=… once, then a cookie)."),
    db: opt.Db = None,
) -> None:
    from tailscope.ui.dashboard import run_dashboard

    def started(url: str, loopback: bool) -> None:
        if not loopback:
            print(f"tailscope ui: WARNING: bound to {host}, not 127.0.0.1: anyone who can reach this port can read "
                  "your runs" + ("" if token else " — pass --token to require a token"), file=sys.stderr)  # fmt: skip
        typer.echo(f"tailscope ui: serving {url} (read-only; Ctrl-C stops)")

    run_dashboard(db, host=host, port=port, token=token, on_start=started)


app = command_app()
app.command("ui", help=_HELP)(ui)
