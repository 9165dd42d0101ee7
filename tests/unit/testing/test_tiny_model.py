"""The tiny-model fixture builder: deterministic, loadable, and shaped for vLLM's CPU backend."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tailscope.testing.tiny_model import (
    SPECIAL_TOKENS,
    TinyModelConfig,
    _train_tokenizer,
    build_tiny_model,
    ensure_tiny_model,
    write_safetensors,
)


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__")
    data = raw[8 + n :]
    out = {}
    end = 0
    for name, meta in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = meta["data_offsets"]
        assert a == end  # contiguous, no gaps
        end = b
        assert meta["dtype"] == "F32"
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(meta["shape"])
    assert end == len(data)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_same_config_gives_identical_files(built: Path, tmp_path: Path) -> None:
    _train_tokenizer.cache_clear()  # retrain: the BPE training itself must be deterministic
    again = build_tiny_model(tmp_path / "again")
    names = sorted(p.name for p in built.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (built / name).read_bytes() == (again / name).read_bytes(), name


def test_config_and_weights_agree(built: Path) -> None:
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"] >= 64
    w = _read_safetensors(built / "model.safetensors")
    v, h = cfg["vocab_size"], cfg["hidden_size"]
    assert w["model.embed_tokens.weight"].shape == (v, h)
    assert w["lm_head.weight"].shape == (v, h)
    assert w["model.layers.0.self_attn.k_proj.weight"].shape == (cfg["num_key_value_heads"] * cfg["head_dim"], h)
    assert sum(k.startswith("model.layers.") for k in w) == 9 * cfg["num_hidden_layers"]


def test_special_tokens_can_never_win(built: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built / "tokenizer.json"))
    lm_head = _read_safetensors(built / "model.safetensors")["lm_head.weight"]
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["eos_token_id"] == tok.token_to_id("<|im_end|>")
    for s in SPECIAL_TOKENS:
        assert not lm_head[tok.token_to_id(s)].any(), s  # logit exactly 0
    # Ordinary tokens have logits of std ≈ logit_std, so some always beat 0 by far.
    assert float(np.linalg.norm(lm_head, axis=1).max()) > 1.0


def test_chat_template_is_in_tokenizer_config(built: Path) -> None:
    tc = json.loads((built / "tokenizer_config.json").read_text())
    assert "<|im_start|>assistant" in tc["chat_template"]
    assert tc["eos_token"] == "<|im_end|>"


def test_ensure_reuses_then_rebuilds_on_config_change(tmp_path: Path) -> None:
    out = tmp_path / "cache"
    ensure_tiny_model(out)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    ensure_tiny_model(out)
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    ensure_tiny_model(out, TinyModelConfig(seed=1))
    assert json.loads((out / "tailscope-tiny-model.json").read_text())["config"]["seed"] == 1
    assert not list(tmp_path.glob("cache.tmp-*"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hidden": 64, "heads": 2}, "head_dim"),
        ({"hidden": 200, "heads": 3}, "multiple of heads"),
        ({"heads": 2, "kv_heads": 3}, "kv_heads"),
    ],
)
def test_rejects_shapes_vllm_cannot_serve(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TinyModelConfig(**kwargs)


def test_write_safetensors_round_trips(tmp_path: Path) -> None:
    tensors = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.ones(5, np.float32)}
    write_safetensors(tmp_path / "x.safetensors", tensors)
    raw = (tmp_path / "x.safetensors").read_bytes()
    assert struct.unpack("<Q", raw[:8])[0] % 8 == 0
    back = _read_safetensors(tmp_path / "x.safetensors")
    assert back.keys() == tensors.keys()
    for k, v in tensors.items():
        np.testing.assert_array_equal(back[k], v)
