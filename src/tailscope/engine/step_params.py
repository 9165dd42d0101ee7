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
    "fit": "11 Levenberg-Marquardt iterations, loss 168.72, 27 s",
    "in_sample_agg": "TTFT MAPE 30.3%, TPOT 15.3%",
    "in_sample_disagg": "TTFT MAPE 50.0%, TPOT 26.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4681,
        "comm": 0.8634,
        "comm_lat_us": 18.35,
        "scaleout_lat_us": 59.39,
        "step_ms": 0.08525,
        "layer_us": 33.96,
        "moe_layer_us": 23.51,
        "prefill_layer_us": 148.3,
        "seq_us": 13.38,
        "frontend_ms": 5.42,
        "inflight_us": 16.42,
        "kv_xfer": 0.5254,
        "kv_xfer_ms": 9.427,
        "burst": 0.1215,
        "pd_burst": 0.07302,
        "token_us": 7.317,
        "dp_wait": 8.521,
        "sched_iters": 1.942,
        "spec_accept": 0.6733,
    },
    "sglang": {
        "attn": 0.4695,
        "comm": 0.8842,
        "comm_lat_us": 19.16,
        "scaleout_lat_us": 57.21,
        "step_ms": 0.08838,
        "layer_us": 33.96,
        "moe_layer_us": 32.57,
        "prefill_layer_us": 154.6,
        "seq_us": 21.15,
        "frontend_ms": 5.439,
        "inflight_us": 17.06,
        "kv_xfer": 0.5244,
        "kv_xfer_ms": 9.551,
        "burst": 0.1402,
        "pd_burst": 0.09919,
        "token_us": 8.125,
        "dp_wait": 8.521,
        "sched_iters": 20.07,
        "spec_accept": 0.6532,
    },
    "trtllm": {
        "attn": 0.4894,
        "comm": 0.8656,
        "comm_lat_us": 15.77,
        "scaleout_lat_us": 62.19,
        "step_ms": 0.08554,
        "layer_us": 28.18,
        "moe_layer_us": 26.98,
        "prefill_layer_us": 141.6,
        "seq_us": 17.85,
        "frontend_ms": 5.318,
        "inflight_us": 16.43,
        "kv_xfer": 0.5236,
        "kv_xfer_ms": 9.183,
        "burst": 0.09085,
        "pd_burst": 0.09471,
        "token_us": 6.402,
        "dp_wait": 14.52,
        "sched_iters": 6.112,
        "spec_accept": 0.6925,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7344, "moe": 0.2072, "mem": 0.8571},
    ("vllm", "fp8"): {"gemm": 0.7828, "moe": 0.1703, "mem": 0.8172},
    ("vllm", "fp4"): {"gemm": 0.7383, "moe": 0.236, "mem": 0.856},
    ("vllm", "int4"): {"gemm": 0.7563, "moe": 0.1896, "mem": 0.8232},
    ("sglang", "bf16"): {"gemm": 0.7891, "moe": 0.1849, "mem": 0.8307},
    ("sglang", "fp8"): {"gemm": 0.8109, "moe": 0.1512, "mem": 0.7853},
    ("sglang", "fp4"): {"gemm": 0.7792, "moe": 0.2113, "mem": 0.8294},
    ("sglang", "int4"): {"gemm": 0.7865, "moe": 0.1687, "mem": 0.792},
    ("trtllm", "bf16"): {"gemm": 0.7435, "moe": 0.2036, "mem": 0.8423},
    ("trtllm", "fp8"): {"gemm": 0.7635, "moe": 0.1672, "mem": 0.7993},
    ("trtllm", "fp4"): {"gemm": 0.764, "moe": 0.232, "mem": 0.8411},
    ("trtllm", "int4"): {"gemm": 0.7584, "moe": 0.1862, "mem": 0.8056},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
