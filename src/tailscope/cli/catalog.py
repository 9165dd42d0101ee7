"""``tailscope catalog``: the built-in models and GPUs with their numbers and sources."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import command_app

_EXAMPLES = """
Examples:

  tailscope catalog models

  tailscope catalog gpus --gpu-file my-gpus.yaml
"""


def catalog(
    what: str = typer.Argument(..., help="models or gpus"),
    gpu_file: Path | None = typer.Option(None, "--gpu-file", help="YAML file with extra GPUs (listed too)."),
    sources: bool = typer.Option(True, "--sources/--no-sources", help="Show where each number comes from."),
) -> None:
    """List the model or GPU catalog used by sim, serve and plan."""
    import sys

    from rich.console import Console
    from rich.table import Table

    from tailscope.errors import ConfigError

    # piped output (files, tests, grep) gets wide lines instead of wrapped ids
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 240)
    if what == "models":
        from tailscope.engine.model_catalog import MODELS

        t = Table(title="Models (config.json values; params computed, checked against the published totals)")
        for col in (
            "id",
            "params",
            "active",
            "layers",
            "hidden",
            "heads/kv",
            "head_dim",
            "experts",
            "KV B/token",
            "weights",
            "aliases",
        ):
            t.add_column(col, justify="left" if col == "id" else "right", no_wrap=True)
        if sources:
            t.add_column("source")
        for e in MODELS:
            a = e.arch()
            row = [
                e.id,
                f"{a.total_params / 1e9:.2f}B",
                f"{a.active_params / 1e9:.2f}B" if a.is_moe else "",
                str(a.layers),
                str(a.hidden),
                f"{a.heads}/{a.kv_heads}" if not a.is_mla else f"{a.heads}/MLA",
                str(a.head_dim),
                f"{a.active_experts}/{a.experts}" if a.is_moe else "",
                f"{a.kv_bytes_per_token('bf16'):,}",
                a.default_weights_dtype,
                ", ".join((e.hf_repo, *e.aliases)),
            ]
            if sources:
                row.append(f"{e.source}; totals: {e.published_source}")
            t.add_row(*row)
        console.print(t)
    elif what == "gpus":
        from tailscope.engine.gpus import GPUS
        from tailscope.io.gpus import load_gpu_file

        extra = load_gpu_file(gpu_file) if gpu_file is not None else ()
        t = Table(title="GPUs (dense tensor throughput)")
        for col in (
            "id",
            "memory GB",
            "HBM GB/s",
            "BF16 TFLOPs",
            "FP8 TFLOPs",
            "FP4 TFLOPs",
            "link GB/s",
            "NVLink GPUs",
            "aliases",
        ):
            t.add_column(col, justify="left" if col == "id" else "right", no_wrap=True)
        if sources:
            t.add_column("source")
        for g in (*GPUS, *extra):
            row = [
                g.id,
                f"{g.memory_gb:g}",
                f"{g.hbm_gbps:,.0f}",
                f"{g.bf16_tflops:,.1f}",
                "—" if g.fp8_tflops is None else f"{g.fp8_tflops:,.1f}",
                "—" if g.fp4_tflops is None else f"{g.fp4_tflops:,.0f}",
                f"{g.interconnect_gbps:g}",
                str(g.nvlink_domain),
                ", ".join(g.aliases),
            ]
            if sources:
                row.append(g.source)
            t.add_row(*row)
        console.print(t)
    else:
        raise ConfigError(f"catalog {what!r}: use 'models' or 'gpus'")


app = command_app()
app.command("catalog", help=(catalog.__doc__ or "") + "\n" + _EXAMPLES)(catalog)
