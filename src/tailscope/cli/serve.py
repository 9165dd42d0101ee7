"""``tailscope serve``: an OpenAI-compatible server whose tokens follow the simulated engine on the wall clock."""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any

import typer

from tailscope.api._flags import ENGINE_FLAGS, FAULT_FLAGS, SERVE, SERVE_POOLS
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, with_flags

if TYPE_CHECKING:
    from tailscope.serve.options import ServeOptions

_EXAMPLES = """
Examples:

  tailscope serve --model llama-3.1-8b --gpu h100-sxm --port 8000

  tailscope serve --model qwen2.5-72b --gpu h100-sxm --tp 4 --speed 2 --max-num-seqs 128

  tailscope serve --fail-rate 0.02 --rate-limit-rate 0.05 --stall-prob 0.1 --stall-ms 3000 --seed 7   # drills
"""


@with_flags([*ENGINE_FLAGS.values(), *SERVE_POOLS.values(), *FAULT_FLAGS.values(), *SERVE.values()])  # sim's engine
def serve(
    host: opt.Host = "127.0.0.1",
    port: opt.Port = 8000,
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context length (default: the model's)."),
    seed: int = typer.Option(0, "--seed", help="Seed of response ids, output lengths and injected faults."),
    exit_on_stdin_eof: bool = typer.Option(False, "--exit-on-stdin-eof", hidden=True),
    **table_flags: Any,
) -> None:
    """Serve the OpenAI API from the simulated engine: tokens leave at the step times the engine model computes."""
    import contextlib

    from tailscope.api.serve import run_server
    from tailscope.cli.common import warn_exposed
    from tailscope.serve.engine_factory import EngineFlags
    from tailscope.serve.faults import FaultConfig

    faults = FaultConfig(**{k: table_flags.pop(k) for k in FAULT_FLAGS}, seed=seed)
    server = {k: table_flags.pop(k) for k in SERVE}
    model, gpu, backend, no_cache = (table_flags.pop(k) for k in ("model", "gpu", "engine", "no_prefix_caching"))
    flags = EngineFlags(**table_flags, enable_prefix_caching=not no_cache, backend=backend,
                        max_model_len=max_model_len)  # fmt: skip
    warn_exposed("serve", host, "; the server has no authentication")

    def ready(options: ServeOptions, url: str) -> None:
        print(f"tailscope serve: built-in simulated engine, {options.description}")
        if faults.any:
            print(f"fault injection on: {faults}")
        if options.otlp_endpoint is not None:
            what = "llm_request spans and their phases" if options.otlp_spans == "phases" else "llm_request spans"
            print(f"exporting {what} to {options.otlp_endpoint} (OTLP/HTTP protobuf)")
        print(f"serving {options.model_name!r} at {url}/v1 (metrics at {url}/metrics); Ctrl-C to stop", flush=True)

    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C during shutdown
        run_server(model, gpu, flags=flags, faults=faults, host=host, port=port, **server, seed=seed, on_ready=ready,
                   exit_on_stdin_eof=exit_on_stdin_eof)  # fmt: skip
    print("tailscope serve: stopped", file=sys.stderr)


app = command_app()
app.command("serve", help=(inspect.getdoc(serve) or "") + "\n" + _EXAMPLES)(serve)
