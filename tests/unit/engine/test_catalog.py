"""Model and GPU catalogs: shapes against published totals, the KV formula, config.json loading, user GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.engine.gpus import GPUS, gpu_ids, resolve_gpu
from tailscope.engine.model_catalog import MODELS, get_model_entry, model_ids
from tailscope.engine.models import dtype_bytes
from tailscope.errors import CatalogError
from tailscope.io.gpus import load_gpu_file
from tailscope.io.models import load_hf_config, resolve_model

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
    # the models of shared/calibration/silicon_dev.csv
    "deepseek-v3",
    "deepseek-r1",
    "kimi-k2.5",
    "qwen3-235b-a22b",
    "qwen3.5-397b-a17b",
    "minimax-m2.5",
    "gpt-oss-120b",
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
    "b300",
    "gb200",
    "gb300",
}


def test_catalog_has_the_required_ids() -> None:
    assert set(model_ids()) >= REQUIRED_MODELS
    assert set(gpu_ids()) >= REQUIRED_GPUS
    assert len(MODELS) >= 12


@pytest.mark.parametrize("entry", MODELS, ids=lambda e: e.id)
def test_parameter_count_matches_published_total(entry) -> None:  # type: ignore[no-untyped-def]
    arch = entry.arch()
    assert entry.published_source
    assert arch.total_params / 1e9 == pytest.approx(entry.published_total_b, rel=entry.published_rel_tol)
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
        ("deepseek-r1", "bf16", 61 * 576 * 2),
        ("deepseek-r1", "fp8", 61 * 576),
        ("qwen3.5-397b-a17b", "bf16", 15 * 2 * 2 * 256 * 2),  # only the 15 full-attention layers keep KV
        ("gpt-oss-120b", "bf16", 36 * 2 * 8 * 64 * 2),
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
    with pytest.raises(CatalogError, match=r"gpus\.yaml:2: gpus\[0\]\.hbm_gbps"):
        load_gpu_file(f)
    f.write_text("gpus:\n  - id: y\n    memory_gb: 96\n    hbm_gbps: -1\n    bf16_tflops: 1\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"gpus\.yaml:4: gpus\[0\]\.hbm_gbps"):
        load_gpu_file(f)
    with pytest.raises(CatalogError, match="not found"):
        load_gpu_file(tmp_path / "nope.yaml")


def test_corpus_names_are_aliases() -> None:
    """Hugging Face ids and AIConfigurator's system names resolve to catalog entries."""
    assert resolve_model("meta-llama/Llama-3.1-70B").layers == 80
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct").hidden == 4096
    assert resolve_model("Qwen/Qwen3-235B-A22B-FP8").default_weights_dtype == "fp8"
    assert resolve_model("nvidia/DeepSeek-R1-NVFP4").default_weights_dtype == "fp4"
    assert resolve_model("moonshotai/Kimi-K2.5").default_weights_dtype == "int4"
    assert resolve_gpu("h100_sxm").id == "h100-sxm"
    assert resolve_gpu("B200_SXM").id == "b200"
    assert resolve_gpu("gb200").nvlink_domain == 72
    assert resolve_gpu("b300_sxm").peak_flops("fp4") > resolve_gpu("b200").peak_flops("fp4")
    # FP4 falls back to FP8 tensor cores where there are no FP4 ones
    assert resolve_gpu("h100-sxm").peak_flops("fp4") == resolve_gpu("h100-sxm").peak_flops("fp8")


def test_new_architectures() -> None:
    ds = resolve_model("deepseek-v3")
    assert ds.is_mla
    assert (ds.q_lora_rank, ds.dense_layers, ds.shared_experts) == (1536, 3, 1)
    qwen35 = resolve_model("qwen3.5-397b-a17b")
    assert (qwen35.linear_layers, qwen35.full_layers, qwen35.shared_experts) == (45, 15, 1)
    assert qwen35.linear_state_bytes_per_seq() == 45 * 64 * 128 * 128 * 4
    # expert-only precisions quantise only the routed experts
    oss = resolve_model("gpt-oss-120b")
    assert oss.weight_bytes("mxfp4") > oss.weight_bytes("fp4") * 0.9
    kimi = resolve_model("kimi-k2.5")
    experts = kimi.moe_layers * kimi.experts * kimi.expert_params_per_layer
    assert kimi.weight_bytes("int4") == pytest.approx(experts * 0.5 + (kimi.total_params - experts) * 2.0)


def test_config_files_of_the_corpus_match_the_catalog(calibration_dir: Path) -> None:
    """The catalog's shapes are the ones the corpus' own config.json files give (skipped without them)."""
    folder = calibration_dir / "model_configs"
    for f in sorted(folder.glob("*_config.json")):
        if f.name.endswith("_hf_quant_config.json"):
            continue
        repo = f.name.removesuffix("_config.json").replace("--", "/")
        from_file = load_hf_config(f)
        cat = resolve_model(repo)
        for attr in ("layers", "hidden", "heads", "kv_heads", "experts", "active_experts", "kv_lora_rank"):
            assert getattr(from_file, attr) == getattr(cat, attr), (repo, attr)
        assert from_file.total_params == pytest.approx(cat.total_params, rel=1e-3), repo
