"""``tailscope sim``: predict latency distributions of a deployment for a workload, in virtual time (no GPU)."""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any

import typer

from tailscope.api._flags import SIM_FLAGS
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, with_flags

_EXAMPLES = """
Examples:

  tailscope sim --model llama-3.1-8b --gpu h100-sxm --rate 20 --requests 10000 --input-tokens uniform:200:1800

  tailscope sim --profile support-chat.yaml --model llama-3.1-8b --gpu h100-sxm --replicas 2 --json sim.json

  tailscope sim --profile p.yaml --model ./config.json --gpu l40s --tp 2 --autoscale policy.yaml --duration 3600

  tailscope sim --model qwen3-32b --gpu h100-sxm --tp 4 --concurrency 64 --requests 2000 \\
      --input-tokens 1024 --output-tokens 512 --calibration my-cluster.yaml

  tailscope sim --model deepseek-ai/DeepSeek-R1 --gpu b200_sxm --engine sglang --tp 8 --ep 8 \\
      --weights-dtype fp4 --kv-dtype fp8 --concurrency 64 --input-tokens 1024 --output-tokens 1024
"""


@with_flags(SIM_FLAGS.values())  # the keyword arguments of tailscope.simulate (api/_flags.py)
def sim(
    ctx: typer.Context,
    json_out: opt.ExportOut = None,
    html_out: opt.HtmlOut = None,
    db: opt.Db = None,
    quiet: opt.Quiet = False,
    **options: Any,
) -> None:
    """Simulate a deployment in virtual time: TTFT/TPOT/ITL/E2E, throughput, KV cache and queueing, no GPU needed."""

    from tailscope.api.sim import simulate
    from tailscope.cli.common import err_console, store_path, typed_params, write_report_html, wrote
    from tailscope.files import to_stdout, write_chunks
    from tailscope.report.sim_console import print_sim_result

    err = err_console()

    def progress(done: int, virtual_s: float) -> None:
        if not quiet:
            err.print(f"simulated {done:,} requests ({virtual_s:,.0f} s of virtual time)")

    prefix_caching = not options.pop("no_prefix_caching")
    out = simulate(**options, prefix_caching=prefix_caching, store=store_path(db), progress=progress,
                   explicit=typed_params(ctx))  # fmt: skip
    # --json -: stdout holds the JSON document only, the text goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if to_stdout(json_out) else contextlib.nullcontext():
        print_sim_result(out, err, timeline=options["autoscale"] is not None)
    if json_out is not None:
        write_chunks(json_out, out.export_chunks())
        wrote(json_out)
    if html_out is not None:
        write_report_html(html_out, out)
    err.print(f"run {out.run.id} stored (kind sim)")


app = command_app()
app.command("sim", help=(inspect.getdoc(sim) or "") + "\n" + _EXAMPLES)(sim)
