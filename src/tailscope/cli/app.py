"""``tailscope app``: the reference AI application — gateway, retrieval, agent, inference, business — as a target."""

from __future__ import annotations

import inspect
import sys
from typing import Any

import typer

from tailscope.api._flags import APP
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, with_flags

_EXAMPLES = """
Examples:

  tailscope app --preset knowledge-assistant --port 8080 --otlp-endpoint http://127.0.0.1:4318

  tailscope app --fix async-auth,parallel-retrieval --time-scale 0.1

  tailscope app --fix all --incident sync-audit,slow-dns

  curl -X POST localhost:8080/admin/degrade -d '{"level": 2}'            # FAQ answers only

  curl -X POST localhost:8080/admin/faults -d '{"fault": "llm-down"}'     # drills: the fallback answers
"""


@with_flags(APP.values())  # the options of tailscope.run_app (api/_flags.py)
def app_command(
    host: opt.Host = "127.0.0.1",
    port: opt.Port = 8080,
    no_fallback: bool = typer.Option(
        False, "--no-fallback", help="Fail requests (502) when the model fails instead of a FAQ/static answer."
    ),
    **options: Any,
) -> None:
    """Serve the reference AI application: an OpenAI-compatible chat endpoint whose requests run through the
    method's layers, each a real span, with the knowledge-assistant case study's costs and its fixes."""
    from tailscope.api.app import AppServer, run_app
    from tailscope.cli.common import warn_exposed

    warn_exposed("app", host, "; the app has no authentication")

    def ready(server: AppServer) -> None:
        p = server.preset
        fixes, incidents, llm_url, otlp = (options[k] for k in ("fixes", "incidents", "llm_url", "otlp_endpoint"))
        engine = f"--llm-url {llm_url}" if llm_url else f"built-in {p.engine.model} on {p.engine.gpu}"
        print(f"tailscope app: preset {p.name} ({engine}); fixes: {fixes or 'none'}; incidents: {incidents or 'none'}")
        if otlp:
            print(f"spans to {otlp}")
        print(
            f"serving {p.served_model!r} at {server.url}/v1 (admin at {server.url}/admin/state); Ctrl-C to stop",
            flush=True,
        )

    stats = run_app(**options, host=host, port=port, fallback=not no_fallback, handle_signals=True, on_ready=ready)
    print(
        f"tailscope app: stopped after {stats.requests} requests ({stats.fallbacks} fallbacks, {stats.errors} failed)",
        file=sys.stderr,
    )


app = command_app()
app.command("app", help=(inspect.getdoc(app_command) or "") + "\n" + _EXAMPLES)(app_command)
