"""``tailscope app``: the reference AI application — gateway, retrieval, agent, inference, business — as a target."""

from __future__ import annotations

import sys

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app

_EXAMPLES = """
Examples:

  tailscope app --preset knowledge-assistant --port 8080 --otlp-endpoint http://127.0.0.1:4318

  tailscope app --fix async-auth,parallel-retrieval --time-scale 0.1

  tailscope app --fix all --incident sync-audit,slow-dns

  curl -X POST localhost:8080/admin/degrade -d '{"level": 2}'            # FAQ answers only

  curl -X POST localhost:8080/admin/faults -d '{"fault": "llm-down"}'     # drills: the fallback answers
"""


def app_command(
    preset: str = typer.Option(
        "knowledge-assistant", "--preset", help="A shipped preset (knowledge-assistant) or a preset YAML file."
    ),
    fix: str = typer.Option("", "--fix", help="Fixes, comma-separated, or 'all' (see docs/app.md)."),
    incident: str = typer.Option(
        "", "--incident", help="Incidents: pool-exhaustion, sync-audit, slow-dns, no-reuse, sse-buffering."
    ),
    host: opt.Host = "127.0.0.1",
    port: opt.Port = 8080,
    time_scale: float = typer.Option(1.0, "--time-scale", help="Run every cost F times as long (0.1 = 10× faster)."),
    llm_url: str | None = typer.Option(
        None, "--llm-url", help="OpenAI-compatible server for the model calls (default: built-in engines)."
    ),
    otlp_endpoint: str | None = typer.Option(
        None, "--otlp-endpoint", help="OTLP/HTTP collector for the spans, e.g. http://127.0.0.1:4318."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-request cost draws."),
    no_fallback: bool = typer.Option(
        False, "--no-fallback", help="Fail requests (502) when the model fails instead of a FAQ/static answer."
    ),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds."),
) -> None:
    """Serve the reference AI application: an OpenAI-compatible chat endpoint whose requests run through the
    method's layers, each a real span, with the knowledge-assistant case study's costs and its fixes."""
    from tailscope.api.app import AppServer, run_app
    from tailscope.cli.common import warn_exposed

    warn_exposed("app", host, "; the app has no authentication")

    def ready(server: AppServer) -> None:
        p = server.preset
        engine = f"--llm-url {llm_url}" if llm_url else f"built-in {p.engine.model} on {p.engine.gpu}"
        print(f"tailscope app: preset {p.name} ({engine}); fixes: {fix or 'none'}; incidents: {incident or 'none'}")
        if otlp_endpoint:
            print(f"spans to {otlp_endpoint}")
        print(
            f"serving {p.served_model!r} at {server.url}/v1 (admin at {server.url}/admin/state); Ctrl-C to stop",
            flush=True,
        )

    stats = run_app(preset=preset, fixes=fix, incidents=incident, host=host, port=port, time_scale=time_scale,
                    llm_url=llm_url, otlp_endpoint=otlp_endpoint, seed=seed, fallback=not no_fallback,
                    duration=duration, handle_signals=True, on_ready=ready)  # fmt: skip
    print(
        f"tailscope app: stopped after {stats.requests} requests ({stats.fallbacks} fallbacks, {stats.errors} failed)",
        file=sys.stderr,
    )


app = command_app()
app.command("app", help=(app_command.__doc__ or "") + "\n" + _EXAMPLES)(app_command)
