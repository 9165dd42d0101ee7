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
    "fit": "7 Levenberg-Marquardt iterations, loss 210.17, 11 s",
    "in_sample_agg": "TTFT MAPE 35.7%, TPOT 16.6%",
    "in_sample_disagg": "TTFT MAPE 57.0%, TPOT 50.8%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4223,
        "comm": 0.9354,
        "comm_lat_us": 9.438,
        "step_ms": 0.1469,
        "layer_us": 61.47,
        "moe_layer_us": 14.29,
        "prefill_layer_us": 178.6,
        "seq_us": 3.528,
        "frontend_ms": 34.8,
        "inflight_us": 217.4,
        "kv_xfer": 0.6018,
        "kv_xfer_ms": 53.26,
        "burst": 0.1273,
        "pd_burst": 0.1023,
    },
    "sglang": {
        "attn": 0.4234,
        "comm": 0.9387,
        "comm_lat_us": 9.407,
        "step_ms": 0.1505,
        "layer_us": 72.52,
        "moe_layer_us": 15.59,
        "prefill_layer_us": 319.8,
        "seq_us": 3.632,
        "frontend_ms": 144.4,
        "inflight_us": 221.0,
        "kv_xfer": 0.6011,
        "kv_xfer_ms": 55.28,
        "burst": 0.2821,
        "pd_burst": 0.1494,
    },
    "trtllm": {
        "attn": 0.4816,
        "comm": 0.9375,
        "comm_lat_us": 8.249,
        "step_ms": 0.1464,
        "layer_us": 49.09,
        "moe_layer_us": 11.86,
        "prefill_layer_us": 216.0,
        "seq_us": 3.6,
        "frontend_ms": 63.51,
        "inflight_us": 219.4,
        "kv_xfer": 0.6014,
        "kv_xfer_ms": 48.2,
        "burst": 0.1339,
        "pd_burst": 0.1663,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7751, "moe": 0.162, "mem": 0.9113},
    ("vllm", "fp8"): {"gemm": 0.8219, "moe": 0.1455, "mem": 0.8937},
    ("vllm", "fp4"): {"gemm": 0.8053, "moe": 0.1533, "mem": 0.9184},
    ("vllm", "int4"): {"gemm": 0.8046, "moe": 0.1611, "mem": 0.9009},
    ("sglang", "bf16"): {"gemm": 0.8195, "moe": 0.1611, "mem": 0.9064},
    ("sglang", "fp8"): {"gemm": 0.8432, "moe": 0.1447, "mem": 0.888},
    ("sglang", "fp4"): {"gemm": 0.8307, "moe": 0.1525, "mem": 0.9138},
    ("sglang", "int4"): {"gemm": 0.8262, "moe": 0.1602, "mem": 0.8954},
    ("trtllm", "bf16"): {"gemm": 0.7769, "moe": 0.2101, "mem": 0.923},
    ("trtllm", "fp8"): {"gemm": 0.7983, "moe": 0.1898, "mem": 0.9075},
    ("trtllm", "fp4"): {"gemm": 0.817, "moe": 0.1994, "mem": 0.9292},
    ("trtllm", "int4"): {"gemm": 0.8005, "moe": 0.2089, "mem": 0.9138},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
