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
        disagg="prefill=1x2,decode=2x2:dp2", backend="sglang", ep=2, kv_offload_gib=4.0, spec_draft=3,
        spec_accept=0.6, spec_draft_model="llama-3.2-1b", batch_wait_iters=5, batch_wait_ratio=0.5, recv_interval=4,
        dp_balance_iters=10, gpu_file=Path("g.yaml"),
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
        "--disagg prefill=1x2,decode=2x2:dp2", "--engine sglang", "--ep 2", "--kv-offload-gib 4.0", "--spec-draft 3",
        "--spec-accept 0.6", "--spec-draft-model llama-3.2-1b", "--batch-wait-iters 5", "--batch-wait-ratio 0.5",
        "--scheduler-recv-interval 4", "--attention-dp-balance-iters 10", "--gpu-file g.yaml",
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


def test_every_engine_setting_has_the_flag_serve_takes() -> None:
    """A child server must run what the parent validated and describes: every EngineFlags field is passed, by a flag
    ``tailscope serve`` has (a field left out once made ``start_builtin_server(backend="sglang")`` serve vLLM's costs
    under a description that said SGLang's)."""
    import dataclasses

    import typer

    from tailscope.cli.serve import app
    from tailscope.serve.child import _FLAG_OF

    fields = {f.name for f in dataclasses.fields(EngineFlags)}
    special = {"tp", "kv_dtype", "gpu_memory_utilization", "enable_prefix_caching"}  # always, or --no-prefix-caching
    assert fields == set(_FLAG_OF) | special
    command = typer.main.get_command(app)
    options = {o for p in command.params for o in p.opts}
    assert set(_FLAG_OF.values()) | {"--tp", "--kv-dtype", "--gpu-memory-utilization", "--no-prefix-caching"} <= options
