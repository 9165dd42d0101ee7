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
    "fit": "16 Levenberg-Marquardt iterations, loss 179.86, 10 s",
    "in_sample_agg": "TTFT MAPE 32.0%, TPOT 15.8%",
    "in_sample_disagg": "TTFT MAPE 51.4%, TPOT 32.6%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.54,
        "comm": 0.9033,
        "comm_lat_us": 16.74,
        "scaleout_lat_us": 60.16,
        "step_ms": 0.1262,
        "layer_us": 39.86,
        "moe_layer_us": 17.47,
        "prefill_layer_us": 177.0,
        "seq_us": 10.38,
        "frontend_ms": 5.121,
        "inflight_us": 75.52,
        "kv_xfer": 0.5344,
        "kv_xfer_ms": 38.81,
        "burst": 0.1096,
        "pd_burst": 0.06013,
        "token_us": 7.481,
        "dp_wait": 8.137,
        "sched_iters": 1.574,
    },
    "sglang": {
        "attn": 0.5385,
        "comm": 0.9126,
        "comm_lat_us": 18.57,
        "scaleout_lat_us": 58.83,
        "step_ms": 0.1301,
        "layer_us": 44.09,
        "moe_layer_us": 21.09,
        "prefill_layer_us": 207.5,
        "seq_us": 13.86,
        "frontend_ms": 5.211,
        "inflight_us": 76.87,
        "kv_xfer": 0.5334,
        "kv_xfer_ms": 39.04,
        "burst": 0.1442,
        "pd_burst": 0.08222,
        "token_us": 8.636,
        "dp_wait": 8.137,
        "sched_iters": 18.6,
    },
    "trtllm": {
        "attn": 0.5701,
        "comm": 0.9045,
        "comm_lat_us": 13.69,
        "scaleout_lat_us": 62.11,
        "step_ms": 0.1257,
        "layer_us": 31.25,
        "moe_layer_us": 16.16,
        "prefill_layer_us": 214.5,
        "seq_us": 12.53,
        "frontend_ms": 5.119,
        "inflight_us": 75.65,
        "kv_xfer": 0.5326,
        "kv_xfer_ms": 36.68,
        "burst": 0.08336,
        "pd_burst": 0.07007,
        "token_us": 6.853,
        "dp_wait": 13.24,
        "sched_iters": 5.833,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7276, "moe": 0.1915, "mem": 0.8595},
    ("vllm", "fp8"): {"gemm": 0.7682, "moe": 0.1604, "mem": 0.8235},
    ("vllm", "fp4"): {"gemm": 0.7335, "moe": 0.2077, "mem": 0.8501},
    ("vllm", "int4"): {"gemm": 0.7482, "moe": 0.1753, "mem": 0.8241},
    ("sglang", "bf16"): {"gemm": 0.7851, "moe": 0.1748, "mem": 0.8305},
    ("sglang", "fp8"): {"gemm": 0.7976, "moe": 0.1459, "mem": 0.7888},
    ("sglang", "fp4"): {"gemm": 0.7737, "moe": 0.1899, "mem": 0.8195},
    ("sglang", "int4"): {"gemm": 0.7791, "moe": 0.1597, "mem": 0.7895},
    ("trtllm", "bf16"): {"gemm": 0.7442, "moe": 0.2073, "mem": 0.8567},
    ("trtllm", "fp8"): {"gemm": 0.7437, "moe": 0.1742, "mem": 0.8201},
    ("trtllm", "fp4"): {"gemm": 0.7571, "moe": 0.2244, "mem": 0.8471},
    ("trtllm", "int4"): {"gemm": 0.7503, "moe": 0.19, "mem": 0.8207},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
