"""The analytic steady state of a deployment with the committed step-model coefficients — the closed loop that the
coefficients are fitted through — for checking the simulator against it (``benchmarks/sim_accuracy.py --sim``).

An internal cross-check of two implementations of one model (the event-by-event simulator and the closed-form loop),
with no meaning to a library user: it lives here, not in the public API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["analytic_closed_loop"]


def analytic_closed_loop(options: Mapping[str, Any]) -> tuple[float, float]:
    """(TTFT, TPOT) in ms of the closed loop for ``options`` — the :func:`tailscope.simulate` keywords of an
    aggregated deployment under a closed-loop workload (``HeldOutRow.simulate_options``)."""
    import numpy as np

    from tailscope.engine.closed_loop import aggregated, coefficient_step, speculative_step, speculative_tokens
    from tailscope.engine.engine_profiles import engine_profile
    from tailscope.engine.fit import corpus_kv_fraction
    from tailscope.engine.speculative import SpeculativeStepModel
    from tailscope.engine.step_model import TrainedStepModel
    from tailscope.sim.run import SimArgs, build_cluster

    o = dict(options)
    o["backend"] = o.pop("engine", "vllm")
    args = SimArgs(**o, store=False)
    cluster = build_cluster(args)
    m = cluster.perf()
    if isinstance(m, SpeculativeStepModel):  # the loop prices the speculation itself (below)
        m = m.target
    if not isinstance(m, TrainedStepModel):
        raise TypeError(f"{o.get('model')}: the closed loop needs the trained step model, got {type(m).__name__}")
    isl, osl = float(args.input_tokens), float(args.output_tokens)
    concurrency = float(args.concurrency or 1)
    ranks = args.replicas * args.attention_dp
    balancing = float(args.attention_dp) if engine_profile(o["backend"]).attention_dp_balance else 1.0
    step = coefficient_step(m.coeffs)
    tokens = np.array([1.0])
    if args.spec_draft:  # an MTP run: priced and counted in rounds, as fitted
        k, p = np.array([float(args.spec_draft)]), np.array([args.spec_accept])
        step, tokens = speculative_step(step, k, p), speculative_tokens(k, p)
    t1, tau = aggregated(
        step,
        np.array([isl]),
        np.array([osl]),
        np.array([concurrency / ranks]),
        np.array([float(cluster.engine_config().max_num_batched_tokens)]),
        np.array([m.efficiency.frontend_ms / 1e3 + m.efficiency.token_us / 1e6 * isl]),
        np.array([m.efficiency.inflight_us / 1e6]),
        np.array([m.efficiency.burst]),
        np.array([m.kv_capacity_tokens(corpus_kv_fraction(o["backend"])) / (isl + osl / 2.0)]),
        np.array([balancing]),
        np.array([m.efficiency.dp_wait]),
        np.array([m.efficiency.sched_iters]),
        tokens,
    )
    return float(t1[0]) * 1e3, float(tau[0]) * 1e3
