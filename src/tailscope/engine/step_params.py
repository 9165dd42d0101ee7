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
    "fit": "9 Levenberg-Marquardt iterations, loss 173.16, 13 s",
    "in_sample_agg": "TTFT MAPE 31.9%, TPOT 15.9%",
    "in_sample_disagg": "TTFT MAPE 50.2%, TPOT 25.9%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4764,
        "comm": 0.8332,
        "comm_lat_us": 18.23,
        "scaleout_lat_us": 60.66,
        "step_ms": 0.09628,
        "layer_us": 35.55,
        "moe_layer_us": 21.86,
        "prefill_layer_us": 152.6,
        "seq_us": 11.48,
        "frontend_ms": 9.013,
        "inflight_us": 26.83,
        "kv_xfer": 0.5155,
        "kv_xfer_ms": 11.12,
        "burst": 0.1301,
        "pd_burst": 0.07143,
        "token_us": 7.091,
        "dp_wait": 8.595,
        "sched_iters": 1.569,
        "spec_accept": 0.7029,
    },
    "sglang": {
        "attn": 0.4684,
        "comm": 0.8633,
        "comm_lat_us": 19.8,
        "scaleout_lat_us": 58.6,
        "step_ms": 0.0998,
        "layer_us": 37.03,
        "moe_layer_us": 28.75,
        "prefill_layer_us": 156.4,
        "seq_us": 15.9,
        "frontend_ms": 9.197,
        "inflight_us": 28.48,
        "kv_xfer": 0.5145,
        "kv_xfer_ms": 11.28,
        "burst": 0.1544,
        "pd_burst": 0.09786,
        "token_us": 8.057,
        "dp_wait": 8.595,
        "sched_iters": 19.8,
        "spec_accept": 0.7029,
    },
    "trtllm": {
        "attn": 0.5,
        "comm": 0.8367,
        "comm_lat_us": 16.19,
        "scaleout_lat_us": 63.35,
        "step_ms": 0.09665,
        "layer_us": 30.12,
        "moe_layer_us": 23.39,
        "prefill_layer_us": 143.8,
        "seq_us": 14.69,
        "frontend_ms": 9.061,
        "inflight_us": 27.22,
        "kv_xfer": 0.5136,
        "kv_xfer_ms": 10.79,
        "burst": 0.09924,
        "pd_burst": 0.09146,
        "token_us": 6.379,
        "dp_wait": 14.77,
        "sched_iters": 6.121,
        "spec_accept": 0.703,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7435, "moe": 0.2102, "mem": 0.8559},
    ("vllm", "fp8"): {"gemm": 0.7908, "moe": 0.1734, "mem": 0.8161},
    ("vllm", "fp4"): {"gemm": 0.7473, "moe": 0.2332, "mem": 0.8546},
    ("vllm", "int4"): {"gemm": 0.7648, "moe": 0.1955, "mem": 0.8204},
    ("sglang", "bf16"): {"gemm": 0.7954, "moe": 0.1893, "mem": 0.8292},
    ("sglang", "fp8"): {"gemm": 0.8178, "moe": 0.1554, "mem": 0.784},
    ("sglang", "fp4"): {"gemm": 0.7863, "moe": 0.2105, "mem": 0.8277},
    ("sglang", "int4"): {"gemm": 0.7935, "moe": 0.1757, "mem": 0.7887},
    ("trtllm", "bf16"): {"gemm": 0.7499, "moe": 0.2049, "mem": 0.8464},
    ("trtllm", "fp8"): {"gemm": 0.7685, "moe": 0.1688, "mem": 0.8046},
    ("trtllm", "fp4"): {"gemm": 0.7711, "moe": 0.2275, "mem": 0.845},
    ("trtllm", "int4"): {"gemm": 0.7652, "moe": 0.1905, "mem": 0.809},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
