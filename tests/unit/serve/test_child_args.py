"""The command line a child server is started with mirrors the in-process settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.errors import ConfigError
from tailscope.serve.child import flags_from, serve_cli_args
from tailscope.serve.engine_factory import EngineFlags
from tailscope.serve.faults import FaultConfig


def test_defaults_are_minimal() -> None:
    args = serve_cli_args("llama-3.1-8b", "h100-sxm", EngineFlags())
    assert args[:5] == ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    assert args[args.index("--port") + 1] == "0"
    for absent in ("--max-num-seqs", "--fail-rate", "--no-prefix-caching", "--no-frontend-latency", "--calibration",
                   "--disagg"):  # fmt: skip
        assert absent not in args


def test_every_setting_is_passed() -> None:
    flags = EngineFlags(
        tp=2, weights_dtype="fp8", kv_dtype="fp8", max_num_seqs=64, max_num_batched_tokens=4096,
        gpu_memory_utilization=0.8, enable_prefix_caching=False, max_model_len=8192, calibration=Path("c.yaml"),
        disagg="prefill=1x2,decode=2x2:dp2",
    )  # fmt: skip
    faults = FaultConfig(fail_rate=0.1, stall_prob=0.2, stall_ms=150.0, seed=9)
    args = serve_cli_args(
        "m", "l4", flags, served_model_name="x", speed=2.5, seed=9, faults=faults, frontend_latency=False
    )
    pairs = dict(zip(args[1::2], args[2::2], strict=False))
    assert args.count("--no-prefix-caching") == 1
    assert "--no-frontend-latency" in args
    joined = " ".join(args)
    for expected in (
        "--tp 2", "--weights-dtype fp8", "--kv-dtype fp8", "--max-num-seqs 64", "--max-num-batched-tokens 4096",
        "--gpu-memory-utilization 0.8", "--max-model-len 8192", "--calibration c.yaml", "--served-model-name x",
        "--speed 2.5", "--seed 9", "--fail-rate 0.1", "--stall-prob 0.2", "--stall-ms 150.0",
        "--disagg prefill=1x2,decode=2x2:dp2",
    ):  # fmt: skip
        assert expected in joined, expected
    assert pairs["--model"] == "m"


def test_fault_seed_must_match() -> None:
    with pytest.raises(ConfigError, match="seed"):
        serve_cli_args("m", "g", EngineFlags(), seed=1, faults=FaultConfig(fail_rate=0.5, seed=2))


def test_flags_from_splits_options() -> None:
    flags, rest = flags_from({"tp": 4, "max_num_seqs": 8, "speed": 3.0, "seed": 1})
    assert flags == EngineFlags(tp=4, max_num_seqs=8)
    assert rest == {"speed": 3.0, "seed": 1}
