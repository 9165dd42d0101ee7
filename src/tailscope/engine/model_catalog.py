"""Built-in model catalog: public ``config.json`` values of popular models, each with its source.

Every entry stores the keys of the model's Hugging Face ``config.json`` (only those the engine uses) and the
published parameter totals; :func:`tailscope.engine.models.arch_from_hf_config` turns it into a
:class:`~tailscope.engine.models.ModelArch`, so the catalog and a user's ``config.json`` take the same path. The
tests compute the parameter counts from these shapes and compare them with the published totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.models import ModelArch, arch_from_hf_config, load_hf_config
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
    """

    id: str
    hf_repo: str
    config: dict[str, Any] = field(default_factory=dict)
    published_total_b: float = 0.0
    published_active_b: float | None = None
    published_source: str = ""

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
    ),
    ModelEntry(
        "llama-3.1-70b",
        "meta-llama/Llama-3.1-70B",
        _llama(8192, 80, 64, 8, 28672, 128256),
        70.6,
        None,
        "https://huggingface.co/meta-llama/Llama-3.1-70B (safetensors metadata: 70.6B params)",
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

_BY_ID = {m.id: m for m in MODELS}


def model_ids() -> list[str]:
    """Catalog ids in catalog order."""
    return [m.id for m in MODELS]


def get_model_entry(model_id: str) -> ModelEntry:
    """The catalog entry for ``model_id``.

    Raises:
        CatalogError: listing the known ids.
    """
    try:
        return _BY_ID[model_id.lower()]
    except KeyError:
        raise CatalogError(
            f"model {model_id!r} is not in the catalog; use one of {', '.join(_BY_ID)} or a path to a config.json"
        ) from None


def resolve_model(ref: str) -> ModelArch:
    """A catalog id (``llama-3.1-8b``) or a path to a Hugging Face ``config.json`` (or its directory)."""
    if ref.lower() in _BY_ID:
        return _BY_ID[ref.lower()].arch()
    if ref.endswith(".json") or "/" in ref or "\\" in ref:
        return load_hf_config(ref)
    return get_model_entry(ref).arch()
