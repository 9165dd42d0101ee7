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
    "fit": "13 Levenberg-Marquardt iterations, loss 194.17, 7 s",
    "in_sample_agg": "TTFT MAPE 34.3%, TPOT 16.1%",
    "in_sample_disagg": "TTFT MAPE 52.9%, TPOT 34.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.5531,
        "comm": 0.9374,
        "comm_lat_us": 14.6,
        "step_ms": 0.1283,
        "layer_us": 44.16,
        "moe_layer_us": 18.87,
        "prefill_layer_us": 148.8,
        "seq_us": 6.902,
        "frontend_ms": 29.12,
        "inflight_us": 67.71,
        "kv_xfer": 0.5404,
        "kv_xfer_ms": 61.38,
        "burst": 0.1255,
        "pd_burst": 0.06415,
        "token_us": 4.387,
        "dp_wait": 7.008,
    },
    "sglang": {
        "attn": 0.5661,
        "comm": 0.9417,
        "comm_lat_us": 15.39,
        "step_ms": 0.1322,
        "layer_us": 49.5,
        "moe_layer_us": 23.7,
        "prefill_layer_us": 305.8,
        "seq_us": 7.393,
        "frontend_ms": 132.6,
        "inflight_us": 69.23,
        "kv_xfer": 0.5394,
        "kv_xfer_ms": 66.33,
        "burst": 0.2748,
        "pd_burst": 0.09077,
        "token_us": 5.084,
        "dp_wait": 7.008,
    },
    "trtllm": {
        "attn": 0.5772,
        "comm": 0.9388,
        "comm_lat_us": 12.49,
        "step_ms": 0.1284,
        "layer_us": 35.99,
        "moe_layer_us": 17.12,
        "prefill_layer_us": 209.4,
        "seq_us": 7.293,
        "frontend_ms": 49.98,
        "inflight_us": 68.34,
        "kv_xfer": 0.5386,
        "kv_xfer_ms": 51.96,
        "burst": 0.1252,
        "pd_burst": 0.07237,
        "token_us": 4.139,
        "dp_wait": 9.823,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7144, "moe": 0.1814, "mem": 0.8658},
    ("vllm", "fp8"): {"gemm": 0.7665, "moe": 0.1462, "mem": 0.8162},
    ("vllm", "fp4"): {"gemm": 0.7366, "moe": 0.1856, "mem": 0.8635},
    ("vllm", "int4"): {"gemm": 0.7463, "moe": 0.1724, "mem": 0.8345},
    ("sglang", "bf16"): {"gemm": 0.7783, "moe": 0.165, "mem": 0.8279},
    ("sglang", "fp8"): {"gemm": 0.7971, "moe": 0.1324, "mem": 0.768},
    ("sglang", "fp4"): {"gemm": 0.775, "moe": 0.1689, "mem": 0.825},
    ("sglang", "int4"): {"gemm": 0.7778, "moe": 0.1567, "mem": 0.7898},
    ("trtllm", "bf16"): {"gemm": 0.7259, "moe": 0.2092, "mem": 0.8658},
    ("trtllm", "fp8"): {"gemm": 0.7353, "moe": 0.1696, "mem": 0.8161},
    ("trtllm", "fp4"): {"gemm": 0.7597, "moe": 0.2139, "mem": 0.8634},
    ("trtllm", "int4"): {"gemm": 0.7451, "moe": 0.1991, "mem": 0.8344},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
