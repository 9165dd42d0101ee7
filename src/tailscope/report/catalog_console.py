"""Console tables of the model and GPU catalogs (``tailscope catalog``): numbers and, optionally, their sources."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from tailscope.engine.gpus import GpuSpec
from tailscope.engine.model_catalog import ModelEntry

_MODEL_COLUMNS = ("id", "params", "active", "layers", "hidden", "heads/kv", "head_dim", "experts", "KV B/token",
                  "weights", "aliases")  # fmt: skip
_GPU_COLUMNS = ("id", "memory GB", "HBM GB/s", "BF16 TFLOPs", "FP8 TFLOPs", "FP4 TFLOPs", "link GB/s", "NVLink GPUs",
                "aliases")  # fmt: skip


def _table(title: str, columns: Sequence[str], rows: Sequence[list[str]], sources: Sequence[str] | None) -> Table:
    """A catalog table: the id left, numbers right, never wrapped; a source column when ``sources`` is given."""
    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col == "id" else "right", no_wrap=True)
    if sources is not None:
        t.add_column("source")
    for i, row in enumerate(rows):
        t.add_row(*row, *((sources[i],) if sources is not None else ()))
    return t


def models_table(models: Sequence[ModelEntry], *, sources: bool = True) -> Table:
    """The model catalog: parameters (total, active), shape, KV bytes per token (bf16), default weights, aliases."""
    rows = []
    for e in models:
        a = e.arch()
        rows.append([
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
        ])  # fmt: skip
    cited = [f"{e.source}; totals: {e.published_source}" for e in models] if sources else None
    title = "Models (config.json values; params computed, checked against the published totals)"
    return _table(title, _MODEL_COLUMNS, rows, cited)


def gpus_table(gpus: Sequence[GpuSpec], *, sources: bool = True) -> Table:
    """The GPU catalog: memory, HBM bandwidth, dense tensor throughput per precision, interconnect, aliases."""
    rows = [
        [
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
        for g in gpus
    ]
    return _table("GPUs (dense tensor throughput)", _GPU_COLUMNS, rows, [g.source for g in gpus] if sources else None)
