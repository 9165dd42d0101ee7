"""Build a tiny random-weight Llama model locally, with no downloads, for tests against real servers.

The result is a Hugging Face model directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``generation_config.json``) that vLLM loads like any other Llama. Its output is
noise, but its shapes, tokenizer and cache behaviour are real, which is all a load test needs.

Design choices:

* **Deterministic.** The tokenizer is a byte-level BPE trained on the CPython standard library's own
  documentation text (``pydoc_data.topics``), and the weights come from a seeded numpy ``Generator``; the same
  :class:`TinyModelConfig` on the same Python/tokenizers versions gives byte-identical files.
* **Outputs run to ``max_tokens``.** Special tokens (EOS included) get an lm-head row of zeros, so their logit is
  0 while every other logit has standard deviation ``logit_std``; EOS is practically never sampled. Byte tokens
  that are not valid UTF-8 on their own are suppressed the same way, so every generated token decodes to
  visible text and a streaming server emits one content chunk per token.
* **No extra dependencies.** ``model.safetensors`` is written by hand (the format is an 8-byte header length,
  a JSON header and raw little-endian tensors), so only numpy and tokenizers are needed.
* **head_dim ≥ 64**, because vLLM's CPU attention backend rejects smaller heads.

Example::

    python -m tailscope.testing.tiny_model --out .cache/tiny-model
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BUILDER_VERSION", "TinyModelConfig", "build_tiny_model", "ensure_tiny_model"]

#: Bumped whenever the builder's output changes for the same config, so cached directories are rebuilt.
BUILDER_VERSION = 1

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MANIFEST = "tailscope-tiny-model.json"


@dataclass(frozen=True, slots=True)
class TinyModelConfig:
    """Shape of the tiny model.

    Attributes:
        hidden: Hidden size (must be a multiple of ``heads``).
        layers: Number of decoder layers.
        heads: Attention heads; ``hidden // heads`` is the head dimension and must be ≥ 64.
        kv_heads: Key/value heads (grouped-query attention when < ``heads``).
        ffn: MLP intermediate size.
        vocab: Target vocabulary size of the trained BPE (the result may be slightly smaller).
        ctx: ``max_position_embeddings`` (tokens).
        seed: Seed of the weight generator.
        logit_std: Standard deviation of the output logits of ordinary tokens; special tokens get logit 0.
    """

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int = 2
    ffn: int = 256
    vocab: int = 2048
    ctx: int = 2048
    seed: int = 0
    logit_std: float = 8.0

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.hidden // self.heads < 64:
            raise ValueError(f"head_dim = hidden/heads must be >= 64 for vLLM's CPU backend (got {self.head_dim})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if min(self.layers, self.ffn, self.ctx) < 1 or self.vocab < 300:
            raise ValueError("layers, ffn and ctx must be >= 1 and vocab >= 300")

    @property
    def head_dim(self) -> int:
        """Dimension of one attention head."""
        return self.hidden // self.heads

    def key(self) -> str:
        """A short hash of this config and the builder version, used to validate cached directories."""
        blob = json.dumps({"v": BUILDER_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def _train_tokenizer(vocab: int) -> Any:
    """Train the byte-level BPE (cached per process: the result is only read and saved, never changed)."""
    import pydoc_data.topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    corpus = [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character that stands for each byte."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = list(bs)
    extra = [b for b in range(256) if b not in bs]
    cs += [256 + k for k in range(len(extra))]
    return {chr(c): b for b, c in zip(bs + extra, cs, strict=True)}


def _suppressed_ids(tokens: list[str], special_ids: set[int]) -> list[int]:
    """Ids that must never be generated: special tokens and tokens that are not valid UTF-8 alone."""
    u2b = _byte_decoder()
    out = set(special_ids)
    for i, t in enumerate(tokens):
        if i in special_ids:
            continue
        try:
            bytes(u2b[ch] for ch in t).decode("utf-8")
        except (UnicodeDecodeError, KeyError):
            out.add(i)
    return sorted(out)


def _weights(cfg: TinyModelConfig, n_vocab: int, suppress: list[int]) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(cfg.seed)

    def rnd(*shape: int, std: float = 0.02) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    h, f, hd = cfg.hidden, cfg.ffn, cfg.head_dim
    w: dict[str, npt.NDArray[np.float32]] = {
        "model.embed_tokens.weight": rnd(n_vocab, h, std=1.0),
        "model.norm.weight": np.ones(h, np.float32),
    }
    # The final RMSNorm makes |h| ≈ sqrt(hidden), so this std gives logits of std ≈ logit_std.
    lm_head = rnd(n_vocab, h, std=cfg.logit_std / float(np.sqrt(h)))
    lm_head[suppress] = 0.0
    w["lm_head.weight"] = lm_head
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = rnd(cfg.heads * hd, h)
        w[p + "self_attn.k_proj.weight"] = rnd(cfg.kv_heads * hd, h)
        w[p + "self_attn.v_proj.weight"] = rnd(cfg.kv_heads * hd, h)
        w[p + "self_attn.o_proj.weight"] = rnd(h, cfg.heads * hd)
        w[p + "mlp.gate_proj.weight"] = rnd(f, h)
        w[p + "mlp.up_proj.weight"] = rnd(f, h)
        w[p + "mlp.down_proj.weight"] = rnd(h, f)
    return w


def write_safetensors(path: Path, tensors: dict[str, npt.NDArray[np.float32]]) -> None:
    """Write float32 tensors in the safetensors format (tensors laid out in name order, header 8-aligned).

    Args:
        path: File to write.
        tensors: Name → float32 array.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        arr = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for name in names:
            fh.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def build_tiny_model(out: Path, cfg: TinyModelConfig | None = None) -> Path:
    """Build the tiny model's Hugging Face directory into ``out`` (created; existing files are overwritten).

    Args:
        out: Target directory.
        cfg: Model shape; defaults to :class:`TinyModelConfig` ().

    Returns:
        ``out``, ready to pass as ``--model`` to vLLM.
    """
    cfg = cfg or TinyModelConfig()
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(cfg.vocab)
    n_vocab = int(tok.get_vocab_size())
    tokens = [""] * n_vocab
    for t, i in tok.get_vocab().items():
        tokens[i] = t
    special = [int(tok.token_to_id(s)) for s in SPECIAL_TOKENS]
    bos, eos = special[0], special[2]
    suppress = _suppressed_ids(tokens, set(special))
    weights = _weights(cfg, n_vocab, suppress)

    write_safetensors(out / "model.safetensors", weights)
    tok.save(str(out / "tokenizer.json"))
    _write_json(
        out / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": cfg.hidden,
            "intermediate_size": cfg.ffn,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "vocab_size": n_vocab,
            "max_position_embeddings": cfg.ctx,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "pad_token_id": bos,
            "torch_dtype": "float32",
        },
    )
    _write_json(out / "generation_config.json", {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": bos})
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": SPECIAL_TOKENS[0],
            "eos_token": SPECIAL_TOKENS[2],
            "pad_token": SPECIAL_TOKENS[0],
            "unk_token": None,
            "add_bos_token": False,
            "model_max_length": cfg.ctx,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    params = sum(int(a.size) for a in weights.values())
    _write_json(
        out / MANIFEST,
        {
            "key": cfg.key(),
            "config": dataclasses.asdict(cfg),
            "vocab_size": n_vocab,
            "suppressed_tokens": len(suppress),
            "parameters": params,
        },
    )
    return out


def _is_built(out: Path, cfg: TinyModelConfig) -> bool:
    try:
        return bool(json.loads((out / MANIFEST).read_text())["key"] == cfg.key())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure_tiny_model(out: Path, cfg: TinyModelConfig | None = None) -> Path:
    """Return ``out`` holding the tiny model for ``cfg``, building it only when missing or stale.

    Safe when several processes call it at once (e.g. two test sessions): each builds into its own temporary
    directory and renames it into place; a loser of the race keeps the winner's identical result.

    Args:
        out: Cache directory, e.g. ``.cache/tiny-model``.
        cfg: Model shape; defaults to :class:`TinyModelConfig` ().

    Returns:
        ``out``.
    """
    cfg = cfg or TinyModelConfig()
    if _is_built(out, cfg):
        return out
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    build_tiny_model(tmp, cfg)
    if out.exists() and not _is_built(out, cfg):
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process put a directory there first
        shutil.rmtree(tmp, ignore_errors=True)
        if not _is_built(out, cfg):
            raise
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m tailscope.testing.tiny_model --out DIR [--hidden N ...]``."""
    defaults = TinyModelConfig()
    parser = argparse.ArgumentParser(description="Build a tiny random Llama (HF directory) offline.")
    parser.add_argument("--out", type=Path, default=Path(".cache/tiny-model"))
    for field in dataclasses.fields(TinyModelConfig):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(getattr(defaults, field.name)))
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(TinyModelConfig)}
    cfg = TinyModelConfig(**{k: v for k, v in overrides.items() if v is not None})
    out = ensure_tiny_model(args.out, cfg)
    print(json.loads((out / MANIFEST).read_text()))


if __name__ == "__main__":
    main()
