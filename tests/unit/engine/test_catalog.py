"""Model and GPU catalogs: shapes against published totals, the KV formula, config.json loading, user GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.engine.gpus import GPUS, gpu_ids, load_gpu_file, resolve_gpu
from tailscope.engine.model_catalog import MODELS, get_model_entry, model_ids, resolve_model
from tailscope.engine.models import dtype_bytes, load_hf_config
from tailscope.errors import CatalogError

REQUIRED_MODELS = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-2-7b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-32b",
    "gemma-2-9b",
    "deepseek-v2-lite",
    "gpt-oss-20b",
    "phi-3-mini",
}
REQUIRED_GPUS = {
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "l4",
    "l40s",
    "a10g",
    "mi300x",
    "rtx-4090",
}


def test_catalog_has_the_required_ids() -> None:
    assert set(model_ids()) >= REQUIRED_MODELS
    assert set(gpu_ids()) >= REQUIRED_GPUS
    assert len(MODELS) >= 12


@pytest.mark.parametrize("entry", MODELS, ids=lambda e: e.id)
def test_parameter_count_matches_published_total(entry) -> None:  # type: ignore[no-untyped-def]
    arch = entry.arch()
    assert entry.published_source
    assert arch.total_params / 1e9 == pytest.approx(entry.published_total_b, rel=0.01)
    if entry.published_active_b is not None:
        assert arch.active_params / 1e9 == pytest.approx(entry.published_active_b, rel=0.05)


@pytest.mark.parametrize(
    ("model", "dtype", "expected"),
    [
        ("opt-13b", "fp16", 819_200),  # PagedAttention paper: "800 KB per token"
        ("llama-2-7b", "bf16", 524_288),
        ("llama-3.1-70b", "bf16", 327_680),
        ("llama-3.1-8b", "bf16", 131_072),
        ("llama-3.1-8b", "fp8", 65_536),
        ("qwen3-32b", "bf16", 262_144),  # head_dim 128 with 64 query heads: q_dim ≠ hidden
        ("deepseek-v2-lite", "bf16", 27 * 576 * 2),  # MLA: one latent of 512 + 64 per layer
    ],
)
def test_kv_bytes_per_token(model: str, dtype: str, expected: int) -> None:
    assert resolve_model(model).kv_bytes_per_token(dtype) == expected


def test_explicit_head_dim_and_sliding_window_are_kept() -> None:
    gemma = resolve_model("gemma-2-9b")
    assert gemma.head_dim == 256 != gemma.hidden // gemma.heads
    assert gemma.sliding_window == 4096
    assert gemma.sliding_layers == 21
    oss = resolve_model("gpt-oss-20b")
    assert oss.sliding_layers == 12
    assert oss.default_weights_dtype == "mxfp4"
    assert oss.is_moe
    assert oss.experts == 32
    assert oss.active_experts == 4


def test_weight_bytes_follow_dtype() -> None:
    m = resolve_model("llama-3.1-8b")
    bf16, fp8 = m.weight_bytes("bf16"), m.weight_bytes("fp8")
    assert bf16 == pytest.approx(2 * m.total_params)
    assert fp8 < bf16 * 0.6  # embeddings stay 16-bit
    with pytest.raises(CatalogError, match="int3"):
        dtype_bytes("int3")


def test_load_hf_config_file(tmp_path: Path) -> None:
    entry = get_model_entry("qwen2.5-7b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(entry.config), encoding="utf-8")
    arch = load_hf_config(path)
    assert arch.total_params == entry.arch().total_params
    assert resolve_model(str(path)).kv_heads == 4
    assert load_hf_config(tmp_path).layers == 28  # a directory holding config.json


def test_bad_config_and_unknown_ids_say_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 8}', encoding="utf-8")
    with pytest.raises(CatalogError, match="num_hidden_layers"):
        load_hf_config(bad)
    with pytest.raises(CatalogError, match=r"llama-3\.1-8b"):
        resolve_model("gpt-5")
    with pytest.raises(CatalogError, match="h100-sxm"):
        resolve_gpu("tpu-v9")


def test_gpu_numbers_are_dense_and_cited() -> None:
    h100 = resolve_gpu("h100-sxm")
    # HBM sizes are binary (CUDA reports 81,559 MiB on an "80 GB" H100); GDDR cards report decimal GB
    assert h100.memory_bytes == pytest.approx(85.5e9, rel=0.01)
    assert resolve_gpu("l4").memory_bytes == pytest.approx(24.15e9, rel=0.01)
    assert h100.bf16_tflops == pytest.approx(989.4)
    assert h100.fp8_tflops == pytest.approx(1978.9)
    assert h100.peak_flops("fp8") == pytest.approx(2 * h100.peak_flops("bf16"), rel=1e-3)
    a100 = resolve_gpu("a100-80gb")
    assert a100.fp8_tflops is None
    assert a100.peak_flops("fp8") == a100.peak_flops("bf16")
    for g in GPUS:
        assert g.source
        assert g.memory_gb > 0
        assert g.hbm_gbps > 0
        assert g.bf16_tflops > 0


def test_user_gpu_file(tmp_path: Path) -> None:
    f = tmp_path / "gpus.yaml"
    f.write_text(
        "gpus:\n  - {id: My-GPU, memory_gb: 96, hbm_gbps: 4000, bf16_tflops: 800, source: lab}\n", encoding="utf-8"
    )
    extra = load_gpu_file(f)
    g = resolve_gpu("my-gpu", extra)
    assert g.memory_gb == 96
    assert g.fp8_tflops is None
    f.write_text("gpus:\n  - {id: x, memory_gb: 96}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="hbm_gbps"):
        load_gpu_file(f)
