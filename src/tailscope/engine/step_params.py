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
    "fit": "11 Levenberg-Marquardt iterations, loss 170.18, 11 s",
    "in_sample_agg": "TTFT MAPE 31.0%, TPOT 15.3%",
    "in_sample_disagg": "TTFT MAPE 50.0%, TPOT 26.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4682,
        "comm": 0.8673,
        "comm_lat_us": 18.52,
        "scaleout_lat_us": 59.36,
        "step_ms": 0.07397,
        "layer_us": 35.07,
        "moe_layer_us": 22.82,
        "prefill_layer_us": 148.5,
        "seq_us": 13.34,
        "frontend_ms": 5.977,
        "inflight_us": 17.14,
        "kv_xfer": 0.525,
        "kv_xfer_ms": 8.855,
        "burst": 0.1211,
        "pd_burst": 0.07268,
        "token_us": 7.215,
        "dp_wait": 8.4,
        "sched_iters": 1.888,
        "spec_accept": 0.6732,
    },
    "sglang": {
        "attn": 0.4696,
        "comm": 0.8869,
        "comm_lat_us": 19.77,
        "scaleout_lat_us": 57.18,
        "step_ms": 0.07699,
        "layer_us": 35.59,
        "moe_layer_us": 30.51,
        "prefill_layer_us": 155.5,
        "seq_us": 21.03,
        "frontend_ms": 6.008,
        "inflight_us": 17.81,
        "kv_xfer": 0.5241,
        "kv_xfer_ms": 8.964,
        "burst": 0.1397,
        "pd_burst": 0.09886,
        "token_us": 7.976,
        "dp_wait": 8.4,
        "sched_iters": 20.07,
        "spec_accept": 0.6531,
    },
    "trtllm": {
        "attn": 0.491,
        "comm": 0.8695,
        "comm_lat_us": 16.35,
        "scaleout_lat_us": 62.15,
        "step_ms": 0.07425,
        "layer_us": 29.66,
        "moe_layer_us": 25.17,
        "prefill_layer_us": 143.3,
        "seq_us": 17.66,
        "frontend_ms": 5.889,
        "inflight_us": 17.17,
        "kv_xfer": 0.5233,
        "kv_xfer_ms": 8.638,
        "burst": 0.09005,
        "pd_burst": 0.09414,
        "token_us": 6.267,
        "dp_wait": 14.11,
        "sched_iters": 6.476,
        "spec_accept": 0.6925,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7329, "moe": 0.2058, "mem": 0.858},
    ("vllm", "fp8"): {"gemm": 0.7781, "moe": 0.169, "mem": 0.8172},
    ("vllm", "fp4"): {"gemm": 0.7339, "moe": 0.2338, "mem": 0.8568},
    ("vllm", "int4"): {"gemm": 0.7526, "moe": 0.1892, "mem": 0.8237},
    ("sglang", "bf16"): {"gemm": 0.7875, "moe": 0.1849, "mem": 0.8312},
    ("sglang", "fp8"): {"gemm": 0.8064, "moe": 0.1511, "mem": 0.7847},
    ("sglang", "fp4"): {"gemm": 0.7751, "moe": 0.2108, "mem": 0.8298},
    ("sglang", "int4"): {"gemm": 0.7829, "moe": 0.1696, "mem": 0.792},
    ("trtllm", "bf16"): {"gemm": 0.7427, "moe": 0.2046, "mem": 0.8434},
    ("trtllm", "fp8"): {"gemm": 0.7544, "moe": 0.1679, "mem": 0.7995},
    ("trtllm", "fp4"): {"gemm": 0.7583, "moe": 0.2324, "mem": 0.8421},
    ("trtllm", "int4"): {"gemm": 0.7536, "moe": 0.1881, "mem": 0.8064},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
