"""Model architectures: the shapes that decide FLOPs, weight bytes and KV-cache bytes.

A :class:`ModelArch` comes from the keys of a Hugging Face ``config.json`` (:func:`arch_from_hf_config`; reading the
file is :func:`tailscope.io.models.load_hf_config`'s job) or from the built-in catalog
(:mod:`tailscope.engine.model_catalog`, which stores the public ``config.json`` values of popular models with their
source). Parameter counts are computed from the shapes, not copied, and the catalog tests check them against the
published totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailscope.errors import CatalogError

#: Bytes per element of each supported weight / KV precision. ``mxfp4`` = 4-bit values + one 8-bit scale per 32;
#: ``fp4`` = NVFP4, 4-bit values + one FP8 scale per 16 (NVIDIA's format; Blackwell has FP4 tensor cores);
#: ``int4`` = 4-bit weight-only (group-quantised; the scales are left out, < 5 %).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "mxfp4": 4.25 / 8,
    "fp4": 4.5 / 8,
}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "fp4")
#: weight precisions that quantise only the routed experts of an MoE model (attention and dense parts stay 16-bit),
#: as the checkpoints that use them ship (gpt-oss MXFP4, Kimi-K2.5 INT4 weight-only)
EXPERT_ONLY_DTYPES = ("mxfp4", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")


def dtype_bytes(dtype: str, *, what: str = "dtype") -> float:
    """Bytes per element of ``dtype``.

    Raises:
        CatalogError: for an unknown precision (the message lists the known ones).
    """
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise CatalogError(f"{what} {dtype!r} is not known; use one of {', '.join(DTYPE_BYTES)}") from None


@dataclass(frozen=True, slots=True)
class ModelArch:
    """A decoder-only transformer's shape.

    Attributes:
        name: catalog id or the path it was loaded from.
        layers: decoder layers.
        hidden: model (residual) width.
        heads / kv_heads: query and key-value heads (kv_heads < heads = GQA).
        head_dim: per-head width; explicit in configs where it differs from ``hidden // heads``.
        intermediate: dense MLP width (also the width of the dense layers of an MoE model).
        vocab: vocabulary size.
        tied_embeddings: the LM head shares the input embedding matrix.
        gated_mlp: SwiGLU/GeGLU (3 matrices) instead of a 2-matrix MLP (OPT).
        attention_bias / mlp_bias: bias vectors (Qwen2 QKV bias, OPT everywhere).
        sliding_window: window size of the sliding-window layers (None = full attention everywhere).
        sliding_layers: how many layers use the sliding window (the rest attend to the full context).
        experts / active_experts: routed experts per MoE layer and experts used per token (0 = dense).
        shared_experts: always-on experts per MoE layer (DeepSeek).
        moe_intermediate: width of one expert's MLP.
        dense_layers: leading layers that keep a dense MLP in an MoE model (DeepSeek ``first_k_dense_replace``).
        kv_lora_rank / qk_rope_head_dim / qk_nope_head_dim / v_head_dim: multi-head latent attention (MLA);
            ``kv_lora_rank > 0`` means the KV cache stores one latent of ``kv_lora_rank + qk_rope_head_dim``
            values per token and layer.
        q_lora_rank: MLA query compression rank (DeepSeek-V3 1536; 0 = a direct query projection).
        shared_intermediate: width of a shared expert when it differs from ``moe_intermediate`` (Qwen3.5
            ``shared_expert_intermediate_size``); 0 = ``moe_intermediate``.
        linear_layers: layers with linear attention (Qwen3.5's Gated DeltaNet): a fixed-size recurrent state per
            sequence instead of a KV cache.
        linear_key_heads / linear_value_heads / linear_key_dim / linear_value_dim: their head counts and widths.
        attn_output_gate: the full-attention query projection also produces an output gate (Qwen3.5), doubling it.
        learned_positions: rows of a learned position-embedding table (OPT), 0 for RoPE models.
        default_weights_dtype: precision the checkpoint ships in.
        source: where the numbers come from.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None
    sliding_layers: int = 0
    experts: int = 0
    active_experts: int = 0
    shared_experts: int = 0
    moe_intermediate: int = 0
    dense_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    shared_intermediate: int = 0
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    attn_output_gate: bool = False
    learned_positions: int = 0
    default_weights_dtype: str = "bf16"
    source: str = ""

    # ---- derived shapes -------------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (``heads × head_dim``; MLA: ``heads × (nope + rope)``)."""
        if self.is_mla:
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.head_dim

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache (full + sliding attention; linear-attention layers keep a state)."""
        return self.layers - self.linear_layers

    @property
    def full_layers(self) -> int:
        """Layers that attend to the whole context."""
        return self.layers - self.linear_layers - self.sliding_layers

    def _attention_params(self) -> int:
        """Parameters of one softmax-attention layer."""
        h = self.hidden
        if self.is_mla:
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.q_dim
            else:
                q = h * self.q_dim
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.heads * self.v_head_dim * h
            return q + kv_a + kv_b + o
        kv = self.kv_heads * self.head_dim
        q_out = self.q_dim * (2 if self.attn_output_gate else 1)
        n = h * q_out + 2 * h * kv + self.q_dim * h
        if self.attention_bias:
            n += self.q_dim + 2 * kv
        return n

    def _linear_attention_params(self) -> int:
        """Parameters of one linear-attention (Gated DeltaNet) layer: q/k/v/z and gate projections, output."""
        k = self.linear_key_heads * self.linear_key_dim
        v = self.linear_value_heads * self.linear_value_dim
        return self.hidden * (2 * k + 2 * v + 2 * self.linear_value_heads) + v * self.hidden

    def _mixer_params_total(self) -> int:
        """Attention (softmax and linear) parameters over all layers."""
        return self.kv_layers * self._attention_params() + self.linear_layers * self._linear_attention_params()

    def linear_state_bytes_per_seq(self) -> float:
        """Recurrent state of one sequence over all linear-attention layers (fp32), bytes."""
        per_layer = self.linear_value_heads * self.linear_key_dim * self.linear_value_dim * 4.0
        return self.linear_layers * per_layer

    def _mlp_params(self, width: int) -> int:
        mats = 3 if self.gated_mlp else 2
        n = mats * self.hidden * width
        if self.mlp_bias:
            n += width + self.hidden
        return n

    def _moe_layer_params(self, experts: int) -> int:
        """MLP parameters of one MoE layer counting ``experts`` routed experts (+ shared experts and router)."""
        n = experts * self._mlp_params(self.moe_intermediate)
        n += self.shared_experts * self._mlp_params(self.shared_intermediate or self.moe_intermediate)
        return n + self.hidden * self.experts

    def _layer_norm_params(self) -> int:
        return 2 * self.hidden * (2 if self.mlp_bias else 1)  # OPT LayerNorm has a bias, RMSNorm not

    def _mlp_total(self, experts_counted: int) -> int:
        if not self.is_moe:
            return self.layers * self._mlp_params(self.intermediate)
        moe_layers = self.layers - self.dense_layers
        dense = self.dense_layers * self._mlp_params(self.intermediate)
        return dense + moe_layers * self._moe_layer_params(experts_counted)

    @property
    def embedding_params(self) -> int:
        """Input embedding table (+ learned positions)."""
        return self.vocab * self.hidden + self.learned_positions * self.hidden

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """Every stored parameter (what the weights occupy)."""
        return (
            self.embedding_params
            + self.lm_head_params
            + self._mixer_params_total()
            + self.layers * self._layer_norm_params()
            + self._mlp_total(self.experts)
            + self.hidden
        )

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies through: all layers with only the active experts, plus the LM head.

        The input embedding is a lookup, not a matmul, so it is excluded; the LM head (or the tied embedding used
        as the head) is included.
        """
        head = self.vocab * self.hidden
        mixer = self._mixer_params_total() + self.layers * self._layer_norm_params()
        return mixer + self._mlp_total(self.active_experts) + head

    @property
    def body_params(self) -> int:
        """Active parameters excluding the LM head (the part every scheduled token runs through)."""
        return self.active_params - self.vocab * self.hidden

    @property
    def expert_params_per_layer(self) -> int:
        """Parameters of one routed expert (0 for dense models)."""
        return self._mlp_params(self.moe_intermediate) if self.is_moe else 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def layer_matmuls(self) -> int:
        """Weight matmuls of one forward pass over all layers — the kernels whose floors and launches a step pays
        however small its batch. Per layer: attention 2 (fused QKV, output), MLA 5–6 (query or its two low-rank
        halves, the KV down-projection, the absorbed K and V up-projections, output), linear attention 3 (its
        two input projections, output); MLP 2 (fused gate/up, down), MoE 3 (router and the grouped expert pair)
        plus 2 for shared experts. A Llama layer counts 4."""
        if self.is_mla:
            attn = (2 if self.q_lora_rank else 1) + 1 + 2 + 1
        else:
            attn = 2
        softmax = self.layers - self.linear_layers
        moe = 3 + (2 if self.shared_experts else 0)
        mlp = (self.layers - self.moe_layers) * 2 + self.moe_layers * moe
        return softmax * attn + self.linear_layers * 3 + mlp

    def weight_bytes(self, weights_dtype: str) -> float:
        """Bytes of all weights at ``weights_dtype``.

        Embeddings and LM head stay at 16 bit, as quantizers keep them; ``mxfp4`` (gpt-oss) quantizes only the
        routed experts and keeps attention, router and dense parts at 16 bit.
        """
        b = dtype_bytes(weights_dtype, what="weights dtype")
        sixteen = self.embedding_params + self.lm_head_params
        if weights_dtype.lower() in EXPERT_ONLY_DTYPES and self.is_moe:
            experts = self.moe_layers * self.experts * self.expert_params_per_layer
            return experts * b + (self.total_params - experts) * 2.0
        return (self.total_params - sixteen) * b + sixteen * 2.0

    def kv_bytes_per_token_resident(self, kv_dtype: str = "bf16", typical_context: int = 4096) -> float:
        """KV bytes a token occupies in the cache on average, for capacity planning.

        Sliding-window layers keep only the last ``window`` tokens of a sequence (vLLM's hybrid allocator frees
        blocks that fall out of the window), so they are charged ``min(1, window / typical_context)`` of a token's
        share; full-attention layers are charged in full. Equals :meth:`kv_bytes_per_token` without sliding layers.
        """
        full = self.kv_bytes_per_token(kv_dtype)
        if not self.sliding_layers or self.sliding_window is None:
            return float(full)
        sliding_share = full * self.sliding_layers / self.kv_layers
        return full - sliding_share + sliding_share * min(1.0, self.sliding_window / typical_context)

    def kv_elements_per_token(self) -> int:
        """KV-cache elements stored per token over all layers: ``2 × layers × kv_heads × head_dim`` (MLA: latent;
        linear-attention layers store none)."""
        if self.is_mla:
            return self.kv_layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * self.kv_layers * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """KV-cache bytes per token, e.g. OPT-13B in fp16 → 819,200 (the PagedAttention paper's "800 KB")."""
        return int(self.kv_elements_per_token() * dtype_bytes(kv_dtype, what="KV dtype"))

    def attention_context(self, context: int, layer_sliding: bool) -> int:
        """Tokens one query attends to at ``context`` on a sliding (True) or full layer."""
        if layer_sliding and self.sliding_window is not None:
            return min(context, self.sliding_window)
        return context


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def arch_from_hf_config(cfg: dict[str, Any], *, name: str, source: str = "") -> ModelArch:
    """Build a :class:`ModelArch` from the keys of a Hugging Face ``config.json``.

    Understands Llama/Mistral/Qwen2/Qwen3/Gemma2/Phi3 (``hidden_size``, ``num_key_value_heads``, ``head_dim``),
    Mixtral/gpt-oss/MiniMax-M2/Qwen3-MoE (``num_local_experts``/``num_experts``, ``num_experts_per_tok``/
    ``experts_per_token``), DeepSeek-V2/V3 and Kimi-K2 (MLA with ``q_lora_rank``, ``n_routed_experts``,
    ``n_shared_experts``, ``first_k_dense_replace``), Qwen3.5 (``layer_types`` with linear-attention layers, a shared
    expert of ``shared_expert_intermediate_size``, ``attn_output_gate``), OPT (``ffn_dim``) and multimodal configs
    that nest the language model under ``text_config``.

    Raises:
        CatalogError: when a required key is missing (names the key).
    """
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = {**cfg, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", ""))
    try:
        hidden = int(_get(cfg, "hidden_size", "d_model", "n_embd"))
        layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers"))
        heads = int(_get(cfg, "num_attention_heads", "n_head"))
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError):
        raise CatalogError(
            f"{name}: config.json lacks hidden_size, num_hidden_layers, num_attention_heads or vocab_size"
        ) from None
    kv_heads = int(_get(cfg, "num_key_value_heads", default=heads))
    head_dim = int(_get(cfg, "head_dim", default=hidden // heads))
    intermediate = int(_get(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden))
    experts = int(_get(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=0))
    active = int(_get(cfg, "num_experts_per_tok", "experts_per_token", default=0)) if experts else 0
    moe_inter = int(_get(cfg, "moe_intermediate_size", default=intermediate)) if experts else 0
    sliding = _get(cfg, "sliding_window")
    use_sliding = cfg.get("use_sliding_window", True)
    layer_types = cfg.get("layer_types")
    types = [str(t) for t in layer_types] if isinstance(layer_types, list) else []
    linear_layers = sum(1 for t in types if "linear" in t)
    sliding_layers = 0
    if sliding is not None and use_sliding:
        if types:
            sliding_layers = sum(1 for t in types if "sliding" in t)
        elif model_type == "gemma2":
            sliding_layers = layers // 2  # Gemma 2 alternates local (sliding) and global layers
        else:
            sliding_layers = layers
    if sliding_layers == 0:
        sliding = None
    shared_width = int(_get(cfg, "shared_expert_intermediate_size", default=0)) if experts else 0
    shared = int(_get(cfg, "n_shared_experts", default=0)) if experts else 0
    if shared == 0 and shared_width > 0:  # Qwen2-MoE / Qwen3.5: one shared expert of its own width
        shared = 1
    is_opt = model_type == "opt"
    return ModelArch(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", is_opt)),
        gated_mlp=not is_opt,
        attention_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe") or is_opt)),
        mlp_bias=is_opt,
        sliding_window=int(sliding) if sliding is not None else None,
        sliding_layers=sliding_layers,
        experts=experts,
        active_experts=active,
        shared_experts=shared,
        moe_intermediate=moe_inter,
        dense_layers=int(_get(cfg, "first_k_dense_replace", default=0)) if experts else 0,
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", default=0)),
        qk_rope_head_dim=int(_get(cfg, "qk_rope_head_dim", default=0)),
        qk_nope_head_dim=int(_get(cfg, "qk_nope_head_dim", default=0)),
        v_head_dim=int(_get(cfg, "v_head_dim", default=0)),
        q_lora_rank=int(_get(cfg, "q_lora_rank", default=0)),
        shared_intermediate=shared_width if shared_width != moe_inter else 0,
        linear_layers=linear_layers,
        linear_key_heads=int(_get(cfg, "linear_num_key_heads", default=0)) if linear_layers else 0,
        linear_value_heads=int(_get(cfg, "linear_num_value_heads", default=0)) if linear_layers else 0,
        linear_key_dim=int(_get(cfg, "linear_key_head_dim", default=0)) if linear_layers else 0,
        linear_value_dim=int(_get(cfg, "linear_value_head_dim", default=0)) if linear_layers else 0,
        attn_output_gate=bool(cfg.get("attn_output_gate", False)),
        learned_positions=int(cfg.get("max_position_embeddings", 0)) + 2 if is_opt else 0,
        default_weights_dtype=_native_dtype(cfg),
        source=source,
    )


def _native_dtype(cfg: dict[str, Any]) -> str:
    """The checkpoint's weight precision from its ``quantization_config`` (bf16 when there is none)."""
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        if method in ("mxfp4", "fp8"):
            return method
        if method in ("modelopt", "nvfp4") or "nvfp4" in str(quant.get("quant_algo", "")).lower():
            return "fp4"
        groups = quant.get("config_groups")
        if isinstance(groups, dict):  # compressed-tensors: 4-bit integer weights (Kimi-K2.5)
            for g in groups.values():
                w = g.get("weights") if isinstance(g, dict) else None
                if isinstance(w, dict) and w.get("num_bits") == 4 and w.get("type") == "int":
                    return "int4"
    return "bf16"


def blocks_for(tokens: int, block_size: int) -> int:
    """KV blocks that hold ``tokens`` tokens."""
    return math.ceil(tokens / block_size) if tokens > 0 else 0
