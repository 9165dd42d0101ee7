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
    """(TTFT, TPOT) in ms of the closed loop for ``options`` — the :func:`tailscope.simulate` keywords of a deployment
    under a closed-loop workload (``HeldOutRow.simulate_options``; ``disagg`` set: prefill and decode pools)."""
    if options.get("disagg"):
        return _disaggregated(options)
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


def _disaggregated(options: Mapping[str, Any]) -> tuple[float, float]:
    """:func:`analytic_closed_loop` of prefill and decode pools, with the terms ``engine/fit.py`` gives such a row."""
    import numpy as np

    from tailscope.engine.closed_loop import coefficient_step, disaggregated, speculative_step, speculative_tokens
    from tailscope.engine.engine_profiles import engine_profile
    from tailscope.engine.fit import corpus_kv_fraction
    from tailscope.engine.speculative import SpeculativeStepModel
    from tailscope.engine.step_model import TrainedStepModel
    from tailscope.sim.run import SimArgs, build_cluster

    o = dict(options)
    o["backend"] = o.pop("engine", "vllm")
    args = SimArgs(**o, store=False)
    cluster = build_cluster(args)
    pre, dec = cluster.perf("prefill"), cluster.perf("decode")
    pre = pre.target if isinstance(pre, SpeculativeStepModel) else pre
    dec = dec.target if isinstance(dec, SpeculativeStepModel) else dec
    if not isinstance(pre, TrainedStepModel) or not isinstance(dec, TrainedStepModel):
        raise TypeError(f"{o.get('model')}: the closed loop needs the trained step model")
    isl, osl = float(args.input_tokens), float(args.output_tokens)
    e = dec.efficiency
    step = coefficient_step(dec.coeffs)
    tokens = np.array([1.0])
    if args.spec_draft:
        k, p = np.array([float(args.spec_draft)]), np.array([args.spec_accept])
        step, tokens = speculative_step(step, k, p), speculative_tokens(k, p)
    balancing = engine_profile(o["backend"]).attention_dp_balance
    t1, tau = disaggregated(
        coefficient_step(pre.coeffs),
        step,
        np.array([isl]),
        np.array([osl]),
        np.array([float(args.concurrency or 1)]),
        np.array([float(cluster.ranks("prefill"))]),
        np.array([float(cluster.ranks("decode"))]),
        np.array([float(cluster.engine_config().max_num_batched_tokens)]),
        np.array([e.frontend_ms / 1e3 + e.token_us / 1e6 * isl]),
        np.array([e.inflight_us / 1e6]),
        np.array([cluster.kv_transfer().ns(int(isl)) / 1e9]),
        np.array([dec.kv_capacity_tokens(corpus_kv_fraction(o["backend"])) / (isl + osl / 2.0)]),
        np.array([e.pd_burst]),
        np.array([float(cluster.pool_parallelism("prefill").attention_dp) if balancing else 1.0]),
        np.array([e.dp_wait]),
        np.array([e.sched_iters]),
        tokens,
    )
    return float(t1[0]) * 1e3, float(tau[0]) * 1e3
