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
    from aiohttp import web

    from tailscope.errors import ConfigError
    from tailscope.ui.dashboard import create_app, is_loopback

    if not 0 < port < 65536:
        raise ConfigError(f"--port must be 1-65535 (got {port})")
    if token is not None and not token:
        raise ConfigError("--token must not be empty")
    loopback = is_loopback(host)
    if not loopback:
        print(
            f"tailscope ui: WARNING: bound to {host}, not 127.0.0.1: anyone who can reach this port can read your runs"
            + ("" if token else " — pass --token to require a token"),
            file=sys.stderr,
        )
    app = create_app(db, token=token, loopback_only=loopback)
    shown = f"[{host}]" if ":" in host else host
    wildcard = host in ("0.0.0.0", "::")  # noqa: S104 (only to print a URL a browser can open)
    url = f"http://{'127.0.0.1' if wildcard else shown}:{port}/" + (f"?token={token}" if token else "")
    typer.echo(f"tailscope ui: serving {url} (read-only; Ctrl-C stops)")
    try:
        web.run_app(app, host=host, port=port, print=None, access_log=None)
    except OSError as exc:
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({exc.strerror}); try another --port"
        ) from None


app = command_app()
app.command("ui", help=_HELP)(ui)
