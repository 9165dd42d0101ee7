"""File loaders at the io/ boundary: GPU files, config.json, calibration files — errors name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.errors import CatalogError, ConfigError
from tailscope.io.calibration import load_calibration
from tailscope.io.gpus import parse_gpu_file
from tailscope.io.models import load_hf_config, resolve_model


def test_gpu_file_fields() -> None:
    text = "gpus:\n  - id: X1\n    memory_gib: 90\n    hbm_gbps: 4000\n    bf16_tflops: 800\n    fp4_tflops: 3200\n"
    (g,) = parse_gpu_file(text, source="g.yaml")
    assert (g.id, g.memory_binary, g.fp4_tflops, g.nvlink_domain) == ("x1", True, 3200, 8)
    with pytest.raises(CatalogError, match=r"g\.yaml:2: gpus\[0\] .*exactly one of memory_gb"):
        parse_gpu_file("gpus:\n  - {id: x, hbm_gbps: 1, bf16_tflops: 1}\n", source="g.yaml")
    full = "gpus:\n  - id: x\n    memory_gb: 9\n    hbm_gbps: 1\n    bf16_tflops: 1\n"
    with pytest.raises(CatalogError, match=r"g\.yaml:6: gpus\[0\]\.speed"):
        parse_gpu_file(full + "    speed: 2\n", source="g.yaml")
    with pytest.raises(CatalogError, match=r"g\.yaml:\d+: not valid YAML"):
        parse_gpu_file("gpus: [\n", source="g.yaml")
    with pytest.raises(CatalogError, match="top-level 'gpus:'"):
        parse_gpu_file("- 1\n", source="g.yaml")


def test_config_json(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "hidden_size": 8,\n  oops\n}', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"config\.json:3: not valid JSON"):
        load_hf_config(bad)
    bad.write_text("[1]", encoding="utf-8")
    with pytest.raises(CatalogError, match="JSON object"):
        load_hf_config(bad)
    with pytest.raises(CatalogError, match=r"no such config\.json"):
        load_hf_config(tmp_path / "missing")
    bad.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "vocab_size": 100}), encoding="utf-8")  # fmt: skip
    assert resolve_model(str(bad)).layers == 2
    assert resolve_model("deepseek-ai/DeepSeek-V3").is_mla  # an alias wins over a path lookup


def test_calibration_file(tmp_path: Path) -> None:
    f = tmp_path / "cal.yaml"
    f.write_text("default:\n  mfu: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"cal\.yaml:\d+: not valid YAML"):
        load_calibration(f)
    f.write_text("default: {mfu: 0.4}\n", encoding="utf-8")
    cal = load_calibration(f)
    assert cal.has_overrides
    assert not load_calibration(None).has_overrides
    with pytest.raises(ConfigError, match="cannot read"):
        load_calibration(tmp_path / "none.yaml")
