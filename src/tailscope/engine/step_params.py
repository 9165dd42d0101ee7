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
    "fit": "11 Levenberg-Marquardt iterations, loss 164.87, 23 s",
    "in_sample_agg": "TTFT MAPE 29.3%, TPOT 15.2%",
    "in_sample_disagg": "TTFT MAPE 48.8%, TPOT 25.9%",
    "note": "in-sample figures; benchmarks/sim_accuracy.py gives the cross-validated ones",
}

#: engine → the coefficients its precision classes share
BY_ENGINE: dict[str, dict[str, float]] = {
    "vllm": {
        "attn": 0.5114,
        "comm": 0.4396,
        "comm_lat_us": 15.81,
        "scaleout_lat_us": 56.63,
        "step_ms": 0.08168,
        "layer_us": 37.27,
        "moe_layer_us": 25.66,
        "prefill_layer_us": 70.65,
        "seq_us": 12.73,
        "frontend_ms": 5.96,
        "inflight_us": 26.94,
        "kv_xfer": 0.5295,
        "kv_xfer_ms": 22.34,
        "burst": 0.1201,
        "pd_burst": 0.08159,
        "token_us": 6.142,
        "dp_wait": 7.134,
        "sched_iters": 2.424,
        "spec_accept": 0.6776,
    },
    "sglang": {
        "attn": 0.5182,
        "comm": 0.4561,
        "comm_lat_us": 16.13,
        "scaleout_lat_us": 51.48,
        "step_ms": 0.08495,
        "layer_us": 35.86,
        "moe_layer_us": 36.17,
        "prefill_layer_us": 71.33,
        "seq_us": 19.32,
        "frontend_ms": 5.951,
        "inflight_us": 27.79,
        "kv_xfer": 0.5286,
        "kv_xfer_ms": 22.83,
        "burst": 0.1308,
        "pd_burst": 0.119,
        "token_us": 6.583,
        "dp_wait": 7.134,
        "sched_iters": 21.09,
        "spec_accept": 0.6569,
    },
    "trtllm": {
        "attn": 0.5391,
        "comm": 0.5083,
        "comm_lat_us": 13.94,
        "scaleout_lat_us": 62.8,
        "step_ms": 0.08248,
        "layer_us": 30.43,
        "moe_layer_us": 30.25,
        "prefill_layer_us": 68.69,
        "seq_us": 16.55,
        "frontend_ms": 5.852,
        "inflight_us": 26.74,
        "kv_xfer": 0.5276,
        "kv_xfer_ms": 21.32,
        "burst": 0.08515,
        "pd_burst": 0.09982,
        "token_us": 5.494,
        "dp_wait": 10.18,
        "sched_iters": 6.632,
        "spec_accept": 0.6973,
    },
}

#: (engine, precision class) → the coefficients that depend on the precision
BY_PRECISION: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "bf16"): {"gemm": 0.7926, "moe": 0.2343, "mem": 0.8467},
    ("vllm", "fp8"): {"gemm": 0.8216, "moe": 0.1959, "mem": 0.8057},
    ("vllm", "fp4"): {"gemm": 0.7863, "moe": 0.267, "mem": 0.8496},
    ("vllm", "int4"): {"gemm": 0.8015, "moe": 0.2172, "mem": 0.8091},
    ("sglang", "bf16"): {"gemm": 0.82, "moe": 0.2292, "mem": 0.8189},
    ("sglang", "fp8"): {"gemm": 0.8335, "moe": 0.1914, "mem": 0.7725},
    ("sglang", "fp4"): {"gemm": 0.8098, "moe": 0.2614, "mem": 0.8221},
    ("sglang", "int4"): {"gemm": 0.8162, "moe": 0.2123, "mem": 0.7763},
    ("trtllm", "bf16"): {"gemm": 0.7809, "moe": 0.2356, "mem": 0.8263},
    ("trtllm", "fp8"): {"gemm": 0.7973, "moe": 0.1971, "mem": 0.7813},
    ("trtllm", "fp4"): {"gemm": 0.7949, "moe": 0.2684, "mem": 0.8295},
    ("trtllm", "int4"): {"gemm": 0.7922, "moe": 0.2184, "mem": 0.785},
}

#: (engine, precision class) → coefficient → value
TABLE: dict[tuple[str, str], dict[str, float]] = {(e, c): BY_ENGINE[e] | own for (e, c), own in BY_PRECISION.items()}


def learned_efficiencies(engine: str, precision_class: str) -> Efficiencies:
    """The coefficients for ``engine`` at ``precision_class`` (defaults where the table has none)."""
    values = TABLE.get((engine, precision_class)) or TABLE.get((engine, "bf16")) or {}
    return Efficiencies(**values)
