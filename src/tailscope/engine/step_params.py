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
    "fit": "13 Levenberg-Marquardt iterations, loss 194.83, 18 s",
    "in_sample_agg": "TTFT MAPE 34.7%, TPOT 16.1%",
    "in_sample_disagg": "TTFT MAPE 53.3%, TPOT 34.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.5518,
        "comm": 0.9329,
        "comm_lat_us": 14.77,
        "step_ms": 0.1282,
        "layer_us": 43.9,
        "moe_layer_us": 18.78,
        "prefill_layer_us": 149.3,
        "seq_us": 7.025,
        "frontend_ms": 29.64,
        "inflight_us": 95.9,
        "kv_xfer": 0.5449,
        "kv_xfer_ms": 86.04,
        "burst": 0.1267,
        "pd_burst": 0.06235,
        "token_us": 4.162,
    },
    "sglang": {
        "attn": 0.5649,
        "comm": 0.9375,
        "comm_lat_us": 15.64,
        "step_ms": 0.1321,
        "layer_us": 49.36,
        "moe_layer_us": 23.54,
        "prefill_layer_us": 302.9,
        "seq_us": 7.564,
        "frontend_ms": 130.1,
        "inflight_us": 97.82,
        "kv_xfer": 0.544,
        "kv_xfer_ms": 87.37,
        "burst": 0.2796,
        "pd_burst": 0.08664,
        "token_us": 4.718,
    },
    "trtllm": {
        "attn": 0.5753,
        "comm": 0.9344,
        "comm_lat_us": 12.64,
        "step_ms": 0.1283,
        "layer_us": 35.92,
        "moe_layer_us": 17.14,
        "prefill_layer_us": 209.7,
        "seq_us": 7.482,
        "frontend_ms": 53.08,
        "inflight_us": 96.69,
        "kv_xfer": 0.5432,
        "kv_xfer_ms": 74.0,
        "burst": 0.127,
        "pd_burst": 0.07049,
        "token_us": 3.92,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7162, "moe": 0.179, "mem": 0.8661},
    ("vllm", "fp8"): {"gemm": 0.7662, "moe": 0.1453, "mem": 0.8179},
    ("vllm", "fp4"): {"gemm": 0.7368, "moe": 0.1803, "mem": 0.8628},
    ("vllm", "int4"): {"gemm": 0.7467, "moe": 0.1723, "mem": 0.835},
    ("sglang", "bf16"): {"gemm": 0.7792, "moe": 0.1639, "mem": 0.8292},
    ("sglang", "fp8"): {"gemm": 0.7967, "moe": 0.1326, "mem": 0.7712},
    ("sglang", "fp4"): {"gemm": 0.7752, "moe": 0.1651, "mem": 0.8252},
    ("sglang", "int4"): {"gemm": 0.7781, "moe": 0.1577, "mem": 0.7915},
    ("trtllm", "bf16"): {"gemm": 0.7297, "moe": 0.2071, "mem": 0.8665},
    ("trtllm", "fp8"): {"gemm": 0.7384, "moe": 0.1692, "mem": 0.8184},
    ("trtllm", "fp4"): {"gemm": 0.7608, "moe": 0.2085, "mem": 0.8632},
    ("trtllm", "int4"): {"gemm": 0.7473, "moe": 0.1997, "mem": 0.8355},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
