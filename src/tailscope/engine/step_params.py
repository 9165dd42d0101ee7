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
    "fit": "13 Levenberg-Marquardt iterations, loss 214.30, 20 s",
    "in_sample_agg": "TTFT MAPE 34.7%, TPOT 16.7%",
    "in_sample_disagg": "TTFT MAPE 67.1%, TPOT 49.2%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.4893,
        "comm": 0.9492,
        "comm_lat_us": 5.126,
        "step_ms": 0.1636,
        "layer_us": 73.54,
        "moe_layer_us": 12.16,
        "prefill_layer_us": 206.0,
        "seq_us": 1.866,
        "frontend_ms": 31.46,
        "inflight_us": 33.17,
        "kv_xfer": 0.531,
        "kv_xfer_ms": 140.0,
        "burst": 0.1118,
    },
    "sglang": {
        "attn": 0.5157,
        "comm": 0.9522,
        "comm_lat_us": 4.991,
        "step_ms": 0.1668,
        "layer_us": 86.11,
        "moe_layer_us": 12.46,
        "prefill_layer_us": 375.8,
        "seq_us": 1.884,
        "frontend_ms": 131.2,
        "inflight_us": 36.88,
        "kv_xfer": 0.5301,
        "kv_xfer_ms": 133.8,
        "burst": 0.2438,
    },
    "trtllm": {
        "attn": 0.5086,
        "comm": 0.9506,
        "comm_lat_us": 4.734,
        "step_ms": 0.1625,
        "layer_us": 56.2,
        "moe_layer_us": 10.25,
        "prefill_layer_us": 247.5,
        "seq_us": 1.864,
        "frontend_ms": 55.04,
        "inflight_us": 35.76,
        "kv_xfer": 0.5293,
        "kv_xfer_ms": 110.8,
        "burst": 0.1151,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7209, "moe": 0.1508, "mem": 0.9574},
    ("vllm", "fp8"): {"gemm": 0.7777, "moe": 0.1257, "mem": 0.954},
    ("vllm", "fp4"): {"gemm": 0.7535, "moe": 0.132, "mem": 0.9593},
    ("vllm", "int4"): {"gemm": 0.7577, "moe": 0.1491, "mem": 0.9551},
    ("sglang", "bf16"): {"gemm": 0.7947, "moe": 0.123, "mem": 0.9576},
    ("sglang", "fp8"): {"gemm": 0.8251, "moe": 0.102, "mem": 0.9543},
    ("sglang", "fp4"): {"gemm": 0.7989, "moe": 0.1072, "mem": 0.9595},
    ("sglang", "int4"): {"gemm": 0.7977, "moe": 0.1215, "mem": 0.9553},
    ("trtllm", "bf16"): {"gemm": 0.7221, "moe": 0.1829, "mem": 0.9617},
    ("trtllm", "fp8"): {"gemm": 0.7403, "moe": 0.1533, "mem": 0.9587},
    ("trtllm", "fp4"): {"gemm": 0.7635, "moe": 0.1608, "mem": 0.9634},
    ("trtllm", "int4"): {"gemm": 0.7486, "moe": 0.1808, "mem": 0.9596},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
