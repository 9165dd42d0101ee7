"""Learned step-model coefficients per (engine, precision class) — generated, do not edit.

Regenerate with ``python scripts/fit_step_model.py`` (the command, the corpus and the fit's figures are in
``FIT``). The values are :class:`~tailscope.engine.step_terms.Efficiencies` fields: fractions of a peak and
fixed costs in ms/µs, shared by every model and GPU; docs/engine.md explains them.
"""

from __future__ import annotations

from tailscope.engine.step_terms import Efficiencies

#: how the table was made
FIT: dict[str, str] = {
    "command": "python scripts/fit_step_model.py",
    "corpus": "silicon_dev.csv: 4255 rows, 3369 distinct measurements",
    "fit": "9 Levenberg-Marquardt iterations, loss 195.27, 53 s",
    "in_sample_agg": "TTFT MAPE 34.7%, TPOT 16.1%",
    "in_sample_disagg": "TTFT MAPE 53.0%, TPOT 34.2%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.5524,
        "comm": 0.933,
        "comm_lat_us": 14.57,
        "step_ms": 0.1402,
        "layer_us": 44.6,
        "moe_layer_us": 19.63,
        "prefill_layer_us": 151.4,
        "seq_us": 7.254,
        "frontend_ms": 29.97,
        "inflight_us": 177.7,
        "kv_xfer": 0.5416,
        "kv_xfer_ms": 59.62,
        "burst": 0.1294,
        "pd_burst": 0.06521,
        "token_us": 4.532,
        "dp_wait": 6.968,
    },
    "sglang": {
        "attn": 0.5654,
        "comm": 0.9377,
        "comm_lat_us": 15.33,
        "step_ms": 0.1472,
        "layer_us": 49.8,
        "moe_layer_us": 24.81,
        "prefill_layer_us": 309.0,
        "seq_us": 7.844,
        "frontend_ms": 133.4,
        "inflight_us": 179.7,
        "kv_xfer": 0.5407,
        "kv_xfer_ms": 64.23,
        "burst": 0.2839,
        "pd_burst": 0.09296,
        "token_us": 5.263,
        "dp_wait": 6.968,
    },
    "trtllm": {
        "attn": 0.5765,
        "comm": 0.9346,
        "comm_lat_us": 12.68,
        "step_ms": 0.141,
        "layer_us": 36.71,
        "moe_layer_us": 18.14,
        "prefill_layer_us": 209.5,
        "seq_us": 7.757,
        "frontend_ms": 53.11,
        "inflight_us": 178.5,
        "kv_xfer": 0.5399,
        "kv_xfer_ms": 50.68,
        "burst": 0.1294,
        "pd_burst": 0.07369,
        "token_us": 4.254,
        "dp_wait": 9.709,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7212, "moe": 0.1838, "mem": 0.8652},
    ("vllm", "fp8"): {"gemm": 0.7676, "moe": 0.1479, "mem": 0.8152},
    ("vllm", "fp4"): {"gemm": 0.7391, "moe": 0.1876, "mem": 0.8637},
    ("vllm", "int4"): {"gemm": 0.749, "moe": 0.1761, "mem": 0.8334},
    ("sglang", "bf16"): {"gemm": 0.7788, "moe": 0.1667, "mem": 0.8271},
    ("sglang", "fp8"): {"gemm": 0.7961, "moe": 0.1336, "mem": 0.7668},
    ("sglang", "fp4"): {"gemm": 0.7749, "moe": 0.1703, "mem": 0.8253},
    ("sglang", "int4"): {"gemm": 0.778, "moe": 0.1596, "mem": 0.7886},
    ("trtllm", "bf16"): {"gemm": 0.7302, "moe": 0.2083, "mem": 0.8629},
    ("trtllm", "fp8"): {"gemm": 0.7365, "moe": 0.1686, "mem": 0.8122},
    ("trtllm", "fp4"): {"gemm": 0.7602, "moe": 0.2125, "mem": 0.8614},
    ("trtllm", "int4"): {"gemm": 0.7471, "moe": 0.1998, "mem": 0.8307},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
