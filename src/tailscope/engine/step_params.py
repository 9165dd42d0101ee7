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
    "fit": "12 Levenberg-Marquardt iterations, loss 161.73, 23 s",
    "in_sample_agg": "TTFT MAPE 29.0%, TPOT 14.7%",
    "in_sample_disagg": "TTFT MAPE 48.3%, TPOT 25.2%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.51,
        "comm": 0.4458,
        "comm_lat_us": 11.56,
        "scaleout_lat_us": 55.58,
        "step_ms": 0.1448,
        "layer_us": 28.1,
        "matmul_us": 3.767,
        "moe_layer_us": 11.87,
        "prefill_layer_us": 88.67,
        "seq_us": 13.53,
        "frontend_ms": 4.974,
        "inflight_us": 58.81,
        "kv_xfer": 0.5374,
        "kv_xfer_ms": 17.48,
        "burst": 0.1091,
        "pd_burst": 0.07681,
        "token_us": 6.062,
        "dp_wait": 6.823,
        "sched_iters": 2.502,
        "spec_accept": 0.7053,
    },
    "sglang": {
        "attn": 0.5224,
        "comm": 0.4697,
        "comm_lat_us": 10.55,
        "scaleout_lat_us": 50.76,
        "step_ms": 0.1448,
        "layer_us": 24.04,
        "matmul_us": 4.214,
        "moe_layer_us": 12.66,
        "prefill_layer_us": 93.5,
        "seq_us": 18.95,
        "frontend_ms": 4.968,
        "inflight_us": 59.82,
        "kv_xfer": 0.5365,
        "kv_xfer_ms": 17.81,
        "burst": 0.1187,
        "pd_burst": 0.1131,
        "token_us": 6.459,
        "dp_wait": 6.823,
        "sched_iters": 21.0,
        "spec_accept": 0.6843,
    },
    "trtllm": {
        "attn": 0.5397,
        "comm": 0.5107,
        "comm_lat_us": 9.093,
        "scaleout_lat_us": 61.34,
        "step_ms": 0.1405,
        "layer_us": 19.95,
        "matmul_us": 3.91,
        "moe_layer_us": 11.76,
        "prefill_layer_us": 90.35,
        "seq_us": 16.52,
        "frontend_ms": 4.889,
        "inflight_us": 58.65,
        "kv_xfer": 0.5356,
        "kv_xfer_ms": 16.86,
        "burst": 0.07589,
        "pd_burst": 0.09362,
        "token_us": 5.434,
        "dp_wait": 9.312,
        "sched_iters": 6.963,
        "spec_accept": 0.7255,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.8032, "moe": 0.2246, "mem": 0.8456},
    ("vllm", "fp8"): {"gemm": 0.8261, "moe": 0.1863, "mem": 0.7925},
    ("vllm", "fp4"): {"gemm": 0.7988, "moe": 0.2547, "mem": 0.8573},
    ("vllm", "int4"): {"gemm": 0.8108, "moe": 0.2078, "mem": 0.7982},
    ("sglang", "bf16"): {"gemm": 0.8292, "moe": 0.2134, "mem": 0.8214},
    ("sglang", "fp8"): {"gemm": 0.8378, "moe": 0.1766, "mem": 0.7624},
    ("sglang", "fp4"): {"gemm": 0.8193, "moe": 0.2424, "mem": 0.8347},
    ("sglang", "int4"): {"gemm": 0.8245, "moe": 0.1972, "mem": 0.7686},
    ("trtllm", "bf16"): {"gemm": 0.7999, "moe": 0.2266, "mem": 0.8309},
    ("trtllm", "fp8"): {"gemm": 0.8084, "moe": 0.1881, "mem": 0.7742},
    ("trtllm", "fp4"): {"gemm": 0.8084, "moe": 0.2568, "mem": 0.8436},
    ("trtllm", "int4"): {"gemm": 0.8059, "moe": 0.2097, "mem": 0.7802},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
