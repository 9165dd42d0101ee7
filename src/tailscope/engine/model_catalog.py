"""Built-in model catalog: public ``config.json`` values of popular models, each with its source.

Every entry stores the keys of the model's Hugging Face ``config.json`` (only those the engine uses) and the
published parameter totals; :func:`tailscope.engine.models.arch_from_hf_config` turns it into a
:class:`~tailscope.engine.models.ModelArch`, so the catalog and a user's ``config.json`` take the same path. The
tests compute the parameter counts from these shapes and compare them with the published totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.models import ModelArch, arch_from_hf_config
from tailscope.errors import CatalogError

_HF = "https://huggingface.co/{}/blob/main/config.json"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One catalog model.

    Attributes:
        id: lowercase catalog id (``llama-3.1-8b``).
        hf_repo: the Hugging Face repository the config comes from.
        config: the ``config.json`` keys (verbatim values).
        published_total_b / published_active_b: parameter totals (billions) as published by the authors.
        published_source: where those totals are stated.
        published_rel_tol: how close the computed total must come to the published one (the tests' tolerance).
        aliases: other names accepted for it (the Hugging Face id itself, its name without the organisation and
            the id's lowercase form are always accepted).
    """

    id: str
    hf_repo: str
    config: dict[str, Any] = field(default_factory=dict)
    published_total_b: float = 0.0
    published_active_b: float | None = None
    published_source: str = ""
    aliases: tuple[str, ...] = ()
    published_rel_tol: float = 0.01

    def names(self) -> tuple[str, ...]:
        """Every lowercase name this entry answers to."""
        repo = self.hf_repo.lower()
        return (self.id, repo, repo.split("/", 1)[-1], *(a.lower() for a in self.aliases))

    @property
    def source(self) -> str:
        return _HF.format(self.hf_repo)

    def arch(self) -> ModelArch:
        return arch_from_hf_config(self.config, name=self.id, source=self.source)


def _llama(hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, **extra: Any) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        **extra,
    }


MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "llama-3.1-8b",
        "meta-llama/Llama-3.1-8B",
        _llama(4096, 32, 32, 8, 14336, 128256),
        8.03,
        None,
        "https://huggingface.co/meta-llama/Llama-3.1-8B (model card: 8.03B params in safetensors metadata)",
        aliases=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b-instruct"),
    ),
    ModelEntry(
        "llama-3.1-70b",
        "meta-llama/Llama-3.1-70B",
        _llama(8192, 80, 64, 8, 28672, 128256),
        70.6,
        None,
        "https://huggingface.co/meta-llama/Llama-3.1-70B (safetensors metadata: 70.6B params)",
        aliases=("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b-instruct"),
    ),
    ModelEntry(
        "llama-2-7b",
        "meta-llama/Llama-2-7b-hf",
        _llama(4096, 32, 32, 32, 11008, 32000),
        6.74,
        None,
        "Touvron et al. 2023, Llama 2 (arXiv:2307.09288); HF safetensors metadata 6.74B",
    ),
    ModelEntry(
        "mistral-7b",
        "mistralai/Mistral-7B-v0.1",
        {**_llama(4096, 32, 32, 8, 14336, 32000), "model_type": "mistral", "sliding_window": 4096},
        7.24,
        None,
        "https://huggingface.co/mistralai/Mistral-7B-v0.1 (safetensors metadata: 7.24B params)",
    ),
    ModelEntry(
        "mixtral-8x7b",
        "mistralai/Mixtral-8x7B-v0.1",
        {
            **_llama(4096, 32, 32, 8, 14336, 32000),
            "model_type": "mixtral",
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
        },
        46.7,
        12.9,
        "Jiang et al. 2024, Mixtral of Experts (arXiv:2401.04088): 46.7B total, 12.9B active",
    ),
    ModelEntry(
        "qwen2.5-7b",
        "Qwen/Qwen2.5-7B",
        {**_llama(3584, 28, 28, 4, 18944, 152064), "model_type": "qwen2", "use_sliding_window": False},
        7.61,
        None,
        "https://huggingface.co/Qwen/Qwen2.5-7B (model card: 7.61B parameters)",
    ),
    ModelEntry(
        "qwen2.5-72b",
        "Qwen/Qwen2.5-72B",
        {**_llama(8192, 80, 64, 8, 29568, 152064), "model_type": "qwen2", "use_sliding_window": False},
        72.7,
        None,
        "https://huggingface.co/Qwen/Qwen2.5-72B (model card: 72.7B parameters)",
    ),
    ModelEntry(
        "qwen3-32b",
        "Qwen/Qwen3-32B",
        {**_llama(5120, 64, 64, 8, 25600, 151936), "model_type": "qwen3", "head_dim": 128},
        32.8,
        None,
        "https://huggingface.co/Qwen/Qwen3-32B (model card: 32.8B parameters)",
    ),
    ModelEntry(
        "qwen3-8b",
        "Qwen/Qwen3-8B",
        {**_llama(4096, 36, 32, 8, 12288, 151936), "model_type": "qwen3", "head_dim": 128},
        8.2,
        None,
        "https://huggingface.co/Qwen/Qwen3-8B (model card: 8.2B parameters)",
    ),
    ModelEntry(
        "gemma-2-9b",
        "google/gemma-2-9b",
        {
            **_llama(3584, 42, 16, 8, 14336, 256000),
            "model_type": "gemma2",
            "head_dim": 256,
            "sliding_window": 4096,
            "tie_word_embeddings": True,
        },
        9.24,
        None,
        "https://huggingface.co/google/gemma-2-9b (safetensors metadata: 9.24B params)",
    ),
    ModelEntry(
        "deepseek-v2-lite",
        "deepseek-ai/DeepSeek-V2-Lite",
        {
            "model_type": "deepseek_v2",
            "hidden_size": 2048,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "intermediate_size": 10944,
            "moe_intermediate_size": 1408,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_experts_per_tok": 6,
            "first_k_dense_replace": 1,
            "kv_lora_rank": 512,
            "q_lora_rank": None,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
            "vocab_size": 102400,
            "tie_word_embeddings": False,
        },
        15.7,
        2.4,
        "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite (model card: 15.7B total, 2.4B activated)",
    ),
    ModelEntry(
        "gpt-oss-20b",
        "openai/gpt-oss-20b",
        {
            "model_type": "gpt_oss",
            "hidden_size": 2880,
            "num_hidden_layers": 24,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "intermediate_size": 2880,
            "num_local_experts": 32,
            "num_experts_per_tok": 4,
            "vocab_size": 201088,
            "attention_bias": True,
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"] * 12,
            "tie_word_embeddings": False,
            "quantization_config": {"quant_method": "mxfp4"},
        },
        20.9,
        3.6,
        "OpenAI, gpt-oss-120b & gpt-oss-20b model card (arXiv:2508.10925): 20.9B total, 3.6B active",
    ),
    ModelEntry(
        "phi-3-mini",
        "microsoft/Phi-3-mini-4k-instruct",
        {**_llama(3072, 32, 32, 32, 8192, 32064), "model_type": "phi3"},
        3.8,
        None,
        "Abdin et al. 2024, Phi-3 Technical Report (arXiv:2404.14219): 3.8B parameters",
    ),
    ModelEntry(
        "opt-13b",
        "facebook/opt-13b",
        {
            "model_type": "opt",
            "hidden_size": 5120,
            "num_hidden_layers": 40,
            "num_attention_heads": 40,
            "ffn_dim": 20480,
            "vocab_size": 50272,
            "max_position_embeddings": 2048,
        },
        12.85,
        None,
        "Zhang et al. 2022, OPT (arXiv:2205.01068): 13B; exact count 12.85B from the HF checkpoint",
    ),
)

_MC = "config.json in shared/calibration/model_configs (the public Hugging Face config of "


def _deepseek_v3(**extra: Any) -> dict[str, Any]:
    """DeepSeek-V3's config.json keys (R1 and V3.1 share the architecture)."""
    return {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "tie_word_embeddings": False,
        **extra,
    }


_FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
#: NVIDIA's NVFP4 checkpoints keep the quantisation in hf_quant_config.json (quant_algo NVFP4, group size 16)
_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
_QWEN3_235B: dict[str, Any] = {
    "model_type": "qwen3_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
}
_DSV3_TOTALS = "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437): 671B total, 37B activated per token"

CORPUS_MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "deepseek-v3",
        "deepseek-ai/DeepSeek-V3",
        _deepseek_v3(quantization_config=_FP8_BLOCK),
        671,
        37,
        _DSV3_TOTALS + "; " + _MC + "deepseek-ai/DeepSeek-V3)",
    ),
    ModelEntry(
        "deepseek-r1",
        "deepseek-ai/DeepSeek-R1",
        _deepseek_v3(quantization_config=_FP8_BLOCK),
        671,
        37,
        "DeepSeek-AI 2025, DeepSeek-R1 (arXiv:2501.12948): built on DeepSeek-V3-Base, 671B total, 37B activated; "
        + _MC
        + "deepseek-ai/DeepSeek-R1)",
    ),
    ModelEntry(
        "deepseek-r1-nvfp4",
        "nvidia/DeepSeek-R1-NVFP4",
        _deepseek_v3(quantization_config=_NVFP4),
        671,
        37,
        _DSV3_TOTALS + "; the DeepSeek-R1 architecture, NVFP4 weights (NVIDIA Model Optimizer checkpoint)",
    ),
    ModelEntry(
        "deepseek-v3.1-nvfp4",
        "nvidia/DeepSeek-V3.1-NVFP4",
        _deepseek_v3(quantization_config=_NVFP4),
        671,
        37,
        _DSV3_TOTALS + "; " + _MC + "nvidia/DeepSeek-V3.1-NVFP4; quantisation from its hf_quant_config.json)",
    ),
    ModelEntry(
        "kimi-k2.5",
        "moonshotai/Kimi-K2.5",
        _deepseek_v3(
            model_type="kimi_k2",
            num_attention_heads=64,
            num_key_value_heads=64,
            n_routed_experts=384,
            first_k_dense_replace=1,
            vocab_size=163840,
            quantization_config={
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
            },
        ),
        1040,
        32.6,
        "Kimi Team 2025, Kimi K2 (arXiv:2507.20534): 1.04T total, 32.6B activated (K2.5 keeps the language model; "
        "its vision encoder is not counted here); " + _MC + "moonshotai/Kimi-K2.5, text_config)",
        # the shapes give 1.026T: 1.3 % below the report's 1.04T, which does not say what else it counts
        published_rel_tol=0.02,
    ),
    ModelEntry(
        "qwen3-235b-a22b",
        "Qwen/Qwen3-235B-A22B",
        _QWEN3_235B,
        235,
        22,
        "Qwen Team 2025, Qwen3 Technical Report (arXiv:2505.09388): 235B total, 22B activated; "
        + _MC
        + "Qwen/Qwen3-235B-A22B-FP8)",
    ),
    ModelEntry(
        "qwen3-235b-a22b-fp8",
        "Qwen/Qwen3-235B-A22B-FP8",
        {**_QWEN3_235B, "quantization_config": _FP8_BLOCK},
        235,
        22,
        "Qwen Team 2025, Qwen3 Technical Report (arXiv:2505.09388): 235B total, 22B activated; "
        + _MC
        + "Qwen/Qwen3-235B-A22B-FP8)",
    ),
    ModelEntry(
        "qwen3.5-397b-a17b",
        "Qwen/Qwen3.5-397B-A17B",
        {
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 4096,
            "num_hidden_layers": 60,
            "num_attention_heads": 32,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "attn_output_gate": True,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 15,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 64,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "moe_intermediate_size": 1024,
            "shared_expert_intermediate_size": 1024,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "vocab_size": 248320,
            "tie_word_embeddings": False,
        },
        397,
        17,
        "https://huggingface.co/Qwen/Qwen3.5-397B-A17B (model card: 397B total, 17B activated, incl. the vision "
        "encoder, which is not counted here); " + _MC + "Qwen/Qwen3.5-397B-A17B, text_config)",
    ),
    ModelEntry(
        "minimax-m2.5",
        "MiniMaxAI/MiniMax-M2.5",
        {
            "model_type": "minimax_m2",
            "hidden_size": 3072,
            "num_hidden_layers": 62,
            "num_attention_heads": 48,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 1536,
            "num_local_experts": 256,
            "num_experts_per_tok": 8,
            "vocab_size": 200064,
            "tie_word_embeddings": False,
            "quantization_config": _FP8_BLOCK,
        },
        229,
        10,
        "https://huggingface.co/MiniMaxAI/MiniMax-M2.5 (model card: 229B total, 10B activated); "
        + _MC
        + "MiniMaxAI/MiniMax-M2.5)",
    ),
    ModelEntry(
        "gpt-oss-120b",
        "openai/gpt-oss-120b",
        {
            "model_type": "gpt_oss",
            "hidden_size": 2880,
            "num_hidden_layers": 36,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "intermediate_size": 2880,
            "num_local_experts": 128,
            "num_experts_per_tok": 4,
            "vocab_size": 201088,
            "attention_bias": True,
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"] * 18,
            "tie_word_embeddings": False,
            "quantization_config": {"quant_method": "mxfp4"},
        },
        116.83,
        5.13,
        "OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card (arXiv:2508.10925): 116.83B total, 5.13B active; "
        + _MC
        + "openai/gpt-oss-120b)",
    ),
    ModelEntry(
        "qwen3-32b-nvfp4",
        "nvidia/Qwen3-32B-NVFP4",
        {
            **_llama(5120, 64, 64, 8, 25600, 151936),
            "model_type": "qwen3",
            "head_dim": 128,
            "quantization_config": _NVFP4,
        },
        32.8,
        None,
        "https://huggingface.co/Qwen/Qwen3-32B (model card: 32.8B parameters); NVFP4 weights (NVIDIA Model "
        "Optimizer checkpoint nvidia/Qwen3-32B-NVFP4)",
    ),
)


MODELS = MODELS + CORPUS_MODELS

_BY_NAME: dict[str, ModelEntry] = {}
for _m in MODELS:
    for _n in _m.names():
        _BY_NAME.setdefault(_n, _m)
for _m in MODELS:  # catalog ids win over aliases
    _BY_NAME[_m.id] = _m


def model_ids() -> list[str]:
    """Catalog ids in catalog order."""
    return [m.id for m in MODELS]


def find_model_entry(name: str) -> ModelEntry | None:
    """The entry whose id, Hugging Face id or alias is ``name`` (case-insensitive), or None."""
    return _BY_NAME.get(name.lower())


def get_model_entry(model_id: str) -> ModelEntry:
    """The catalog entry for ``model_id`` (an id, a Hugging Face id or an alias).

    Raises:
        CatalogError: listing the known ids.
    """
    entry = find_model_entry(model_id)
    if entry is None:
        raise CatalogError(
            f"model {model_id!r} is not in the catalog; use one of {', '.join(model_ids())}, a Hugging Face id of "
            "one of them, or a path to a config.json"
        )
    return entry


def resolve_model(ref: str) -> ModelArch:
    """The catalog model called ``ref`` (id, Hugging Face id or alias); paths are read by
    :func:`tailscope.io.models.resolve_model`.

    Raises:
        CatalogError: listing the known ids.
    """
    return get_model_entry(ref).arch()
