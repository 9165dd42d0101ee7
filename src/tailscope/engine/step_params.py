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
    "fit": "11 Levenberg-Marquardt iterations, loss 167.96, 20 s",
    "in_sample_agg": "TTFT MAPE 29.9%, TPOT 15.3%",
    "in_sample_disagg": "TTFT MAPE 50.1%, TPOT 26.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4671,
        "comm": 0.8526,
        "comm_lat_us": 18.5,
        "scaleout_lat_us": 59.4,
        "step_ms": 0.08471,
        "layer_us": 33.48,
        "moe_layer_us": 23.76,
        "prefill_layer_us": 147.6,
        "seq_us": 13.27,
        "frontend_ms": 5.648,
        "inflight_us": 16.5,
        "kv_xfer": 0.5274,
        "kv_xfer_ms": 18.73,
        "burst": 0.1214,
        "pd_burst": 0.07223,
        "token_us": 7.169,
        "dp_wait": 7.537,
        "sched_iters": 1.936,
        "spec_accept": 0.6765,
    },
    "sglang": {
        "attn": 0.4693,
        "comm": 0.8764,
        "comm_lat_us": 19.23,
        "scaleout_lat_us": 57.35,
        "step_ms": 0.08785,
        "layer_us": 33.29,
        "moe_layer_us": 33.06,
        "prefill_layer_us": 153.7,
        "seq_us": 20.98,
        "frontend_ms": 5.664,
        "inflight_us": 17.16,
        "kv_xfer": 0.5264,
        "kv_xfer_ms": 19.04,
        "burst": 0.1411,
        "pd_burst": 0.0977,
        "token_us": 7.859,
        "dp_wait": 7.537,
        "sched_iters": 19.92,
        "spec_accept": 0.6559,
    },
    "trtllm": {
        "attn": 0.4877,
        "comm": 0.8548,
        "comm_lat_us": 15.92,
        "scaleout_lat_us": 62.06,
        "step_ms": 0.08506,
        "layer_us": 27.82,
        "moe_layer_us": 27.54,
        "prefill_layer_us": 141.0,
        "seq_us": 17.66,
        "frontend_ms": 5.548,
        "inflight_us": 16.51,
        "kv_xfer": 0.5256,
        "kv_xfer_ms": 18.0,
        "burst": 0.08962,
        "pd_burst": 0.09365,
        "token_us": 6.223,
        "dp_wait": 11.36,
        "sched_iters": 6.195,
        "spec_accept": 0.6963,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7338, "moe": 0.2061, "mem": 0.8559},
    ("vllm", "fp8"): {"gemm": 0.7819, "moe": 0.1701, "mem": 0.8162},
    ("vllm", "fp4"): {"gemm": 0.7368, "moe": 0.2329, "mem": 0.854},
    ("vllm", "int4"): {"gemm": 0.7554, "moe": 0.1893, "mem": 0.8216},
    ("sglang", "bf16"): {"gemm": 0.7886, "moe": 0.184, "mem": 0.8287},
    ("sglang", "fp8"): {"gemm": 0.8102, "moe": 0.1511, "mem": 0.7834},
    ("sglang", "fp4"): {"gemm": 0.7781, "moe": 0.2087, "mem": 0.8265},
    ("sglang", "int4"): {"gemm": 0.7858, "moe": 0.1686, "mem": 0.7895},
    ("trtllm", "bf16"): {"gemm": 0.7431, "moe": 0.2021, "mem": 0.8397},
    ("trtllm", "fp8"): {"gemm": 0.7628, "moe": 0.1667, "mem": 0.7966},
    ("trtllm", "fp4"): {"gemm": 0.7625, "moe": 0.2286, "mem": 0.8377},
    ("trtllm", "int4"): {"gemm": 0.7576, "moe": 0.1856, "mem": 0.8024},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
