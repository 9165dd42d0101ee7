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
    "fit": "10 Levenberg-Marquardt iterations, loss 208.75, 18 s",
    "in_sample_agg": "TTFT MAPE 34.9%, TPOT 16.8%",
    "in_sample_disagg": "TTFT MAPE 57.3%, TPOT 50.2%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4302,
        "comm": 0.9554,
        "comm_lat_us": 9.235,
        "step_ms": 0.1341,
        "layer_us": 63.49,
        "moe_layer_us": 12.33,
        "prefill_layer_us": 172.6,
        "seq_us": 3.286,
        "frontend_ms": 34.7,
        "inflight_us": 9.668,
        "kv_xfer": 0.592,
        "kv_xfer_ms": 53.61,
        "burst": 0.1304,
        "pd_burst": 0.09741,
    },
    "sglang": {
        "attn": 0.4306,
        "comm": 0.9582,
        "comm_lat_us": 9.181,
        "step_ms": 0.1376,
        "layer_us": 74.92,
        "moe_layer_us": 13.01,
        "prefill_layer_us": 301.6,
        "seq_us": 3.37,
        "frontend_ms": 147.4,
        "inflight_us": 10.31,
        "kv_xfer": 0.5913,
        "kv_xfer_ms": 56.16,
        "burst": 0.2875,
        "pd_burst": 0.144,
    },
    "trtllm": {
        "attn": 0.4843,
        "comm": 0.957,
        "comm_lat_us": 8.04,
        "step_ms": 0.1333,
        "layer_us": 49.24,
        "moe_layer_us": 10.31,
        "prefill_layer_us": 209.1,
        "seq_us": 3.358,
        "frontend_ms": 63.65,
        "inflight_us": 9.969,
        "kv_xfer": 0.5915,
        "kv_xfer_ms": 48.63,
        "burst": 0.1365,
        "pd_burst": 0.1618,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7761, "moe": 0.1642, "mem": 0.9146},
    ("vllm", "fp8"): {"gemm": 0.8275, "moe": 0.1467, "mem": 0.8989},
    ("vllm", "fp4"): {"gemm": 0.8082, "moe": 0.1545, "mem": 0.9213},
    ("vllm", "int4"): {"gemm": 0.8074, "moe": 0.1632, "mem": 0.9053},
    ("sglang", "bf16"): {"gemm": 0.8224, "moe": 0.1628, "mem": 0.9108},
    ("sglang", "fp8"): {"gemm": 0.8489, "moe": 0.1455, "mem": 0.8946},
    ("sglang", "fp4"): {"gemm": 0.8341, "moe": 0.1533, "mem": 0.9178},
    ("sglang", "int4"): {"gemm": 0.8296, "moe": 0.1619, "mem": 0.9012},
    ("trtllm", "bf16"): {"gemm": 0.7748, "moe": 0.2128, "mem": 0.9257},
    ("trtllm", "fp8"): {"gemm": 0.8013, "moe": 0.1914, "mem": 0.912},
    ("trtllm", "fp4"): {"gemm": 0.8189, "moe": 0.201, "mem": 0.9316},
    ("trtllm", "int4"): {"gemm": 0.8014, "moe": 0.2116, "mem": 0.9176},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
