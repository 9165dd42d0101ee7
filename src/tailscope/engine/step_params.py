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
    "fit": "11 Levenberg-Marquardt iterations, loss 196.08, 6 s",
    "in_sample_agg": "TTFT MAPE 35.3%, TPOT 16.1%",
    "in_sample_disagg": "TTFT MAPE 53.5%, TPOT 34.0%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.5033,
        "comm": 0.9288,
        "comm_lat_us": 15.05,
        "step_ms": 0.1353,
        "layer_us": 42.87,
        "moe_layer_us": 19.07,
        "prefill_layer_us": 164.5,
        "seq_us": 5.609,
        "frontend_ms": 34.33,
        "inflight_us": 140.0,
        "kv_xfer": 0.5424,
        "kv_xfer_ms": 82.11,
        "burst": 0.1285,
        "pd_burst": 0.06181,
    },
    "sglang": {
        "attn": 0.5247,
        "comm": 0.9344,
        "comm_lat_us": 16.01,
        "step_ms": 0.1402,
        "layer_us": 48.24,
        "moe_layer_us": 24.18,
        "prefill_layer_us": 289.0,
        "seq_us": 6.184,
        "frontend_ms": 142.0,
        "inflight_us": 142.4,
        "kv_xfer": 0.5414,
        "kv_xfer_ms": 84.21,
        "burst": 0.2897,
        "pd_burst": 0.08912,
    },
    "trtllm": {
        "attn": 0.5456,
        "comm": 0.9306,
        "comm_lat_us": 13.01,
        "step_ms": 0.1357,
        "layer_us": 35.6,
        "moe_layer_us": 17.54,
        "prefill_layer_us": 203.6,
        "seq_us": 6.163,
        "frontend_ms": 62.37,
        "inflight_us": 141.0,
        "kv_xfer": 0.5407,
        "kv_xfer_ms": 71.21,
        "burst": 0.1341,
        "pd_burst": 0.07075,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7352, "moe": 0.1657, "mem": 0.8634},
    ("vllm", "fp8"): {"gemm": 0.7821, "moe": 0.1358, "mem": 0.8151},
    ("vllm", "fp4"): {"gemm": 0.756, "moe": 0.1664, "mem": 0.86},
    ("vllm", "int4"): {"gemm": 0.7639, "moe": 0.164, "mem": 0.8306},
    ("sglang", "bf16"): {"gemm": 0.7889, "moe": 0.1601, "mem": 0.8234},
    ("sglang", "fp8"): {"gemm": 0.808, "moe": 0.1311, "mem": 0.7647},
    ("sglang", "fp4"): {"gemm": 0.7891, "moe": 0.1608, "mem": 0.8192},
    ("sglang", "int4"): {"gemm": 0.7904, "moe": 0.1584, "mem": 0.7833},
    ("trtllm", "bf16"): {"gemm": 0.743, "moe": 0.2026, "mem": 0.86},
    ("trtllm", "fp8"): {"gemm": 0.7553, "moe": 0.1674, "mem": 0.8107},
    ("trtllm", "fp4"): {"gemm": 0.7747, "moe": 0.2034, "mem": 0.8566},
    ("trtllm", "int4"): {"gemm": 0.7617, "moe": 0.2006, "mem": 0.8266},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
