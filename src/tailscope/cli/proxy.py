"""``tailscope proxy``: a fault-injecting proxy (latency, errors, resets, stalls, bandwidth, black hole) with a live
admin API, to put in front of any dependency."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import PROXY_RULES
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, verbatim, with_flags

_HELP = """Put a fault-injecting proxy in front of a dependency: latency (fixed, uniform or lognormal, per direction),
HTTP errors for a share of requests, resets, stalls mid-stream, a bandwidth cap or a black hole. Rules are set at
start (flags, one rule each, or --rules FILE) and changed live over the admin API: GET /rules, POST /rules (add),
PUT /rules (replace), DELETE /rules (clear), DELETE /rules/NAME (see docs/drills.md).

Examples:

  tailscope proxy --listen 9000 --to http://127.0.0.1:8000 --latency lognormal:200,600

  tailscope proxy --listen 9000 --to http://127.0.0.1:8000 --error 503:0.1 --admin-port 9001

  tailscope proxy --listen 5433 --to 127.0.0.1:5432 --mode tcp --stall 2000:100

  curl -X POST localhost:9001/rules -d '{"name": "down", "error": {"status": 503}}'
  curl -X DELETE localhost:9001/rules
"""


@with_flags(PROXY_RULES.values())  # one rule per flag (api/_flags.py)
def proxy_command(
    listen: int = typer.Option(..., "--listen", help="Port to listen on (0 = a free one)."),
    to: str = typer.Option(..., "--to", help="Upstream: a URL (http mode) or HOST:PORT (tcp mode)."),
    admin_port: int = typer.Option(0, "--admin-port", help="Admin API port (0 = a free one, printed)."),
    host: opt.Host = "127.0.0.1",
    mode: str = typer.Option("http", "--mode", help="http (rules per request) or tcp (per connection)."),
    rules_file: Path | None = typer.Option(None, "--rules", help="Rules YAML file (rules: [...])."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shares' and latencies' draws."),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds."),
    **rule_flags: Any,
) -> None:
    from tailscope.api.proxy import ProxyServer, run_proxy
    from tailscope.cli.common import warn_exposed
    from tailscope.io.proxy_rules import rules_from_flags

    rules = rules_from_flags(**rule_flags)
    warn_exposed("proxy", host, ", and so does the admin API")

    def ready(server: ProxyServer) -> None:
        names = ", ".join(r.name for r in server.rules) or "none"
        print(f"tailscope proxy: {server.url} → {to} ({mode}); rules: {names}")
        print(f"admin API at {server.admin_url}/rules; Ctrl-C to stop", flush=True)

    stats = run_proxy(to=to, port=listen, host=host, admin_port=admin_port, rules=rules, rules_file=rules_file,
                      mode=mode, seed=seed, duration=duration, handle_signals=True, on_ready=ready)  # fmt: skip
    print(
        f"tailscope proxy: stopped after {stats['requests']} requests ({stats['errors_injected']} errors, "
        f"{stats['resets']} resets, {stats['stalls']} stalls, {stats['blackholed']} black-holed)",
        file=sys.stderr,
    )


app = command_app()
app.command("proxy", help=verbatim(_HELP))(proxy_command)
