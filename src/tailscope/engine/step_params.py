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
    "fit": "9 Levenberg-Marquardt iterations, loss 188.17, 5 s",
    "in_sample_agg": "TTFT MAPE 33.4%, TPOT 16.0%",
    "in_sample_disagg": "TTFT MAPE 51.6%, TPOT 33.9%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4978,
        "comm": 0.9348,
        "comm_lat_us": 17.02,
        "step_ms": 0.1266,
        "layer_us": 40.6,
        "moe_layer_us": 17.9,
        "prefill_layer_us": 168.7,
        "seq_us": 9.17,
        "frontend_ms": 7.745,
        "inflight_us": 24.25,
        "kv_xfer": 0.5175,
        "kv_xfer_ms": 40.24,
        "burst": 0.1284,
        "pd_burst": 0.06307,
        "token_us": 7.186,
        "dp_wait": 7.657,
        "sched_iters": 1.71,
    },
    "sglang": {
        "attn": 0.486,
        "comm": 0.9406,
        "comm_lat_us": 19.06,
        "step_ms": 0.1318,
        "layer_us": 45.47,
        "moe_layer_us": 21.61,
        "prefill_layer_us": 173.5,
        "seq_us": 11.8,
        "frontend_ms": 7.814,
        "inflight_us": 25.64,
        "kv_xfer": 0.5166,
        "kv_xfer_ms": 40.9,
        "burst": 0.1489,
        "pd_burst": 0.08823,
        "token_us": 7.928,
        "dp_wait": 7.657,
        "sched_iters": 20.66,
    },
    "trtllm": {
        "attn": 0.5279,
        "comm": 0.9366,
        "comm_lat_us": 14.47,
        "step_ms": 0.1273,
        "layer_us": 33.25,
        "moe_layer_us": 16.98,
        "prefill_layer_us": 163.2,
        "seq_us": 10.35,
        "frontend_ms": 7.839,
        "inflight_us": 24.54,
        "kv_xfer": 0.5157,
        "kv_xfer_ms": 37.39,
        "burst": 0.09697,
        "pd_burst": 0.07507,
        "token_us": 6.582,
        "dp_wait": 11.73,
        "sched_iters": 6.689,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7381, "moe": 0.2031, "mem": 0.8563},
    ("vllm", "fp8"): {"gemm": 0.7858, "moe": 0.1692, "mem": 0.8177},
    ("vllm", "fp4"): {"gemm": 0.7437, "moe": 0.2227, "mem": 0.8548},
    ("vllm", "int4"): {"gemm": 0.7597, "moe": 0.1878, "mem": 0.8199},
    ("sglang", "bf16"): {"gemm": 0.7908, "moe": 0.1833, "mem": 0.8291},
    ("sglang", "fp8"): {"gemm": 0.8113, "moe": 0.152, "mem": 0.785},
    ("sglang", "fp4"): {"gemm": 0.7821, "moe": 0.2014, "mem": 0.8273},
    ("sglang", "int4"): {"gemm": 0.7881, "moe": 0.1691, "mem": 0.7875},
    ("trtllm", "bf16"): {"gemm": 0.7408, "moe": 0.2072, "mem": 0.8536},
    ("trtllm", "fp8"): {"gemm": 0.7583, "moe": 0.1728, "mem": 0.8144},
    ("trtllm", "fp4"): {"gemm": 0.7627, "moe": 0.2271, "mem": 0.852},
    ("trtllm", "int4"): {"gemm": 0.7565, "moe": 0.1917, "mem": 0.8167},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
