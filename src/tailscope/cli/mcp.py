"""``tailscope mcp``: serve the library as Model Context Protocol tools over stdio (for agents)."""

from __future__ import annotations

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app
from tailscope.errors import ConfigError

app = command_app()


@app.command("mcp")
def mcp(
    db: opt.Db = None,
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Let the bench tool target hosts other than this machine's loopback."
    ),
) -> None:
    """Serve tailscope as MCP tools on stdin/stdout (bench, runs_list, runs_show, …), bounded and JSON-only.

    Example (an MCP client's server entry): {"command": "tailscope", "args": ["mcp", "--db", "runs.duckdb"]}
    """
    try:
        from tailscope.mcp.server import McpSettings, serve_stdio
    except ImportError as exc:
        raise ConfigError(f"tailscope mcp needs the MCP SDK: pip install 'tailscope[mcp]' ({exc})") from None
    serve_stdio(McpSettings(store=db, allow_remote=allow_remote))
