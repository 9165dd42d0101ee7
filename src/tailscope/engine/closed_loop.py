"""Steady state of a closed loop, analytically: mean TTFT and TPOT of ``C`` clients sending fixed-length requests.

This is how the step model is fitted and cross-validated on thousands of measured closed-loop runs in seconds; the
simulator (``tailscope sim``) runs the same step model request by request and lands close to it (the benchmark
reports by how much). Everything is vectorised over rows (numpy arrays of equal length).

**Aggregated** (one replica — one attention-DP rank — with ``C`` clients, prompts of ``I`` tokens, ``O`` outputs;
decodes first and prefill chunks in the same step, as the simulator schedules): with ``τ`` the mean time per output
token and ``T₁`` the mean TTFT, Little's law gives the request rate and the decode batch,

    λ = C / (T₁ + (O − 1) τ)            B = λ (O − 1) τ            D = B (I + O/2)   (KV tokens the decodes read)

a decode-only step takes ``t_d = step(B, D)``, and a prompt adds ``Δ = Σ_chunks step(B, D, chunk) − t_d`` of step
time, in chunks of the budget left after the decodes (``K − B`` tokens). Prompts arrive ``λ τ`` per step, so

    τ   = t_d / (1 − ρ)                 ρ = λ Δ   (the share of step time spent on prefills)
    T₁  = F + r + n_chunks · t_d + Δ + W + k τ

with ``F`` the front end (``frontend_ms`` + ``inflight_us × C``, plus ``burst × (C − 1) / 2 × S₁``: measured closed
loops with fixed lengths stay partly synchronised, so a request arrives with a learned share of the others and waits
for half of their prefills, each ``S₁`` alone), ``r = (τ² + λτ δ²) / 2τ`` the residual of the step in progress at
arrival (``δ = Δ / n_chunks``), ``W = ρ Δ / 2(1 − ρ)`` the wait behind other prompts (M/D/1), and ``k τ`` the
iterations the engine's loop runs before its scheduler takes the request in (``sched_iters``, learned per engine:
SGLang reads its input every ``scheduler_recv_interval`` iterations). On an
attention-DP rank of an engine that balances its ranks' context requests (TensorRT-LLM: a context request waits
until every rank has one, or a number of iterations; :func:`balance_wait`), ``T₁`` also carries that wait:
the harmonic combination of ``dp_wait × τ`` and ``H(dp − 1) / λ``, the time until the other ranks have all
received a prompt.
Written in the decode batch ``B``, the closed loop ``C = λ T₁ + B`` (clients waiting for a first token plus
clients decoding) is increasing in ``B``; it is solved by bisection on ``[0, C]``, so the answer is a smooth,
deterministic function of the coefficients (the fit differentiates it numerically).

**Admission** (both modes): a rank holds at most ``N`` requests at once (``max_running``: the KV cache it has, in
requests of the mean context ``I + O/2``); with ``C > N`` clients the loop above runs with ``N`` and the other
``C − N`` wait for a place, by Little's law ``(C − N) / λ`` each on average, which TTFT carries.

**Disaggregated** (prefill workers, decode workers, KV moved between them): the decode pool runs decode-only steps
with ``C / decode ranks`` requests each, ``τ = step(B, D)``; a prompt costs ``S = Σ_chunks step(0, 0, chunk)`` on a
prefill rank that sees ``λ / prefill ranks`` of them (M/D/1 wait), then its KV crosses to the decode worker
(:func:`tailscope.engine.disagg.kv_transfer_seconds`): ``T₁ = F + A + W + S + transfer + k τ`` (``k τ``: the decode
worker's scheduler taking the request in, as aggregated). ``A = pd_burst × (C − 1) /
prefill ranks / 2 × S`` is the synchronised arrivals' wait as aggregated, with its own learned share: a request
arrives with ``pd_burst`` of the other clients, spread over the prefill ranks, and waits for half of their prefills
(without it the measured disaggregated TTFT was under-predicted at every load, median −50 % to −93 %); a balancing
engine's attention-DP prefill ranks add :func:`balance_wait` with an idle prefill step as the iteration. The front
end ``F = frontend_ms + inflight_us × n`` counts the requests at the prefill rank (``n = 1 + λ / prefill ranks ×
(W + S)``, Little), as the simulator's prefill worker does; charged on the decode rank's batch instead, the refit
with ``pd_burst`` pushed ``inflight_us`` from ≈ 30 µs to ≈ 220 µs to stand in for prefill waits, and the aggregated
rows paid for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tailscope.engine.speculative import DRAFT_COST
from tailscope.engine.step_terms import StepCoefficients, chunk_sums, step_seconds

Arr = Any  # numpy.ndarray of float64

#: ``step(n_decode, context per decode, chunk tokens, tokens before the chunk, logits) → seconds``, vectorised
StepFn = Callable[[Arr, Arr, Arr, Arr, Arr], Arr]

_ITERS = 60
_EULER = 0.5772
_RHO_MAX = 0.97


def coefficient_step(c: StepCoefficients) -> StepFn:
    """The trained model's step time as a :data:`StepFn` over rows."""
    cap = np.where(np.asarray(c.window) > 0, c.window, 1.0)

    def step(n: Arr, ctx: Arr, chunk: Arr, done: Arr, logits: Arr) -> Arr:
        pf, ps, kf, ks = chunk_sums(chunk, done, c.window, minimum=np.minimum)
        n_pf = (chunk > 0) * 1.0
        return step_seconds(
            c, n, n * ctx, n * np.minimum(ctx, cap), chunk, pf, ps, kf, ks, n_pf, logits, maximum=np.maximum
        )

    return step


def speculative_step(step: StepFn, draft: Arr, accept: Arr, draft_cost: float = DRAFT_COST) -> StepFn:
    """``step`` with speculative decoding, priced as :class:`~tailscope.engine.speculative.SpeculativeStepModel`
    prices it (``draft_cost``: its default, :data:`~tailscope.engine.speculative.DRAFT_COST`): a round is ``draft``
    draft steps (``draft_cost`` × a decode step each) and one verification step over ``n·(draft + 1)`` tokens at the
    same total context, emitting ``E = (1 − p^(k+1)) / (1 − p)`` tokens per sequence; the decodes of a step cost one
    round ÷ ``E`` instead of one decode step. Rows with ``draft`` 0 are unchanged."""
    k = np.asarray(draft, dtype=float)
    tokens = speculative_tokens(k, accept)

    def spec(n: Arr, ctx: Arr, chunk: Arr, done: Arr, logits: Arr) -> Arr:
        base = step(n, ctx, chunk, done, logits)
        zero = np.zeros_like(np.asarray(n, dtype=float))
        one = step(n, ctx, zero, zero, n)
        verify = step(n * (k + 1.0), ctx / (k + 1.0), zero, zero, n * (k + 1.0))
        extra = (verify + k * draft_cost * one) / tokens - one
        return base + np.where((k > 0) & (np.asarray(n) > 0), extra, 0.0)

    return spec


def speculative_tokens(draft: Arr, accept: Arr) -> Arr:
    """Tokens a sequence emits per decode iteration: ``E = (1 − p^(k+1)) / (1 − p)`` with ``draft`` k > 0, else 1.
    An iteration of a speculative decode is a round, ``E`` of :func:`speculative_step`'s per-token steps: the waits
    the closed loops count in the engine's iterations (its scheduler's cadence ``sched_iters``, attention-DP
    balancing) are rounds, as :class:`~tailscope.engine.speculative.SpeculativeStepModel` charges them in the
    simulator. Both still run the steps themselves per token (the step in progress at an arrival, a prompt's chunk
    steps): the simulator emits one token per sequence per step."""
    k = np.asarray(draft, dtype=float)
    p = np.minimum(np.asarray(accept, dtype=float), 1.0 - 1e-9)
    return np.where(k > 0, (1.0 - p ** (k + 1.0)) / (1.0 - p), 1.0)


def _prefill_cost(step: StepFn, isl: Arr, budget: Arr, b: Arr, ctx: Arr, base: Arr) -> tuple[Arr, Arr]:
    """``(Δ, chunks)``: the step time a prompt adds over ``base`` in chunks of ``budget`` tokens next to ``b``
    decodes of mean context ``ctx`` (``b`` 0 and ``base`` 0 give a prefill-only worker's service time)."""
    budget = np.maximum(budget, 1.0)
    n = np.ceil(isl / budget)
    total = np.zeros_like(isl)
    for j in range(int(np.max(n))):
        done = j * budget
        active = done < isl
        chunk = np.where(active, np.minimum(budget, isl - done), 0.0)
        last = active & (done + chunk >= isl)
        t = step(b, ctx, chunk, np.where(active, done, 0.0), b + last)
        total = total + np.where(active, t - base, 0.0)
    return total, n


def _bisect(g: Any, hi: Arr) -> Arr:
    """The root in [0, hi] of the increasing function ``g`` (vectorised).

    Regula falsi with the Illinois modification, ``_ITERS`` rounds at most: superlinear, always bracketed, and
    deterministic — the answer is a smooth function of ``g`` (the fit differentiates it numerically).
    """
    lo = np.zeros_like(hi)
    g_lo = g(lo)
    g_hi = g(hi)
    # g(0) = −C < 0 and g(C) ≥ 0 in a closed loop; guard against a degenerate bracket anyway
    g_hi = np.where(g_hi <= 0, np.abs(g_lo) + 1.0, g_hi)
    side = np.zeros_like(hi)
    x = hi
    for _ in range(_ITERS):
        x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        x = np.where(np.isfinite(x), np.clip(x, lo, hi), 0.5 * (lo + hi))
        gx = g(x)
        pos = gx > 0
        # Illinois: halve the stale end's value when the same end moves twice, to keep superlinear convergence
        g_lo = np.where(pos, np.where(side < 0, g_lo * 0.5, g_lo), gx)
        g_hi = np.where(pos, gx, np.where(side > 0, g_hi * 0.5, g_hi))
        lo = np.where(pos, lo, x)
        hi = np.where(pos, x, hi)
        side = np.where(pos, -1.0, 1.0)
        if np.all(hi - lo <= 1e-9 * np.maximum(hi, 1.0)) or np.all(np.abs(gx) <= 1e-9):
            break
    return x


def aggregated(
    step: StepFn,
    isl: Arr,
    osl: Arr,
    clients: Arr,
    budget: Arr,
    frontend_s: Arr,
    inflight_s: Arr,
    burst: Arr = 0.0,
    max_running: Arr | None = None,
    dp: Arr = 1.0,
    dp_wait: Arr = 0.0,
    sched_iters: Arr = 0.0,
    tokens: Arr = 1.0,
    wait_iters: Arr = 0.0,
    wait_ratio: Arr = 0.0,
) -> tuple[Arr, Arr]:
    """Mean ``(TTFT, TPOT)`` in seconds of an aggregated replica (see the module docstring); ``max_running``
    caps the requests the replica holds at once (the clients beyond it wait for admission); ``dp`` counts the
    attention-DP ranks that balance their context requests (1: no balancing), ``dp_wait`` its iterations at most;
    ``tokens`` the tokens a decode emits per iteration (:func:`speculative_tokens`; ``step`` then prices one of
    them, and the waits counted in iterations last ``tokens`` of its decode steps each); ``wait_iters`` and
    ``wait_ratio`` the engine's batch waiting (:func:`batch_wait`; 0: none)."""
    isl = np.asarray(isl, dtype=float)
    osl = np.asarray(osl, dtype=float)
    clients_all = np.asarray(clients, dtype=float)
    clients = _admitted(clients_all, max_running)
    ctx = isl + osl / 2.0
    front = frontend_s + inflight_s * clients
    gen = np.maximum(osl - 1.0, 1e-9)  # one output token: no decode phase (B → 0)

    zero = np.zeros_like(isl)
    # partly synchronised arrivals: a request waits for half the prefills of the burst × (C − 1) arriving with it
    alone = step(zero, zero, isl, zero, zero + 1.0)
    together = burst * np.maximum(clients - 1.0, 0.0) * 0.5 * alone

    def state(b: Arr) -> tuple[Arr, Arr, Arr]:
        t_d = step(b, ctx, zero, zero, b)
        delta, n = _prefill_cost(step, isl, budget - b, b, ctx, t_d)
        lam = b / (gen * t_d + b * delta)
        lam = np.where(b > 0, lam, 0.0)
        rho = np.minimum(lam * delta, _RHO_MAX)
        tau = t_d / (1.0 - rho)
        per_chunk = delta / np.maximum(n, 1.0)
        it = tau * tokens  # one iteration of the engine's loop (a speculative round)
        resid = (tau**2 + lam * tau * per_chunk**2) / (2.0 * tau)
        wait = rho * delta / (2.0 * (1.0 - rho))
        ttft = front + together + resid + n * t_d + delta + wait + sched_iters * it
        ttft = ttft + balance_wait(dp, dp_wait, it, lam, clients)
        ttft = ttft + batch_wait(wait_iters, wait_ratio * budget, b, isl, it, lam)
        return lam, ttft, tau

    def excess(b: Arr) -> Arr:
        lam, ttft, _ = state(b)
        return lam * ttft + b - clients

    b = _bisect(excess, clients)
    lam, ttft, tau = state(b)
    return ttft + _queued(clients_all, clients, lam), tau


def disaggregated(
    pre: StepFn,
    dec: StepFn,
    isl: Arr,
    osl: Arr,
    clients: Arr,
    prefill_ranks: Arr,
    decode_ranks: Arr,
    budget: Arr,
    frontend_s: Arr,
    inflight_s: Arr,
    transfer_s: Arr,
    max_running: Arr | None = None,
    burst: Arr = 0.0,
    dp: Arr = 1.0,
    dp_wait: Arr = 0.0,
    sched_iters: Arr = 0.0,
    tokens: Arr = 1.0,
) -> tuple[Arr, Arr]:
    """Mean ``(TTFT, TPOT)`` in seconds of a disaggregated deployment (see the module docstring); ``max_running``
    caps the requests one decode rank holds at once, ``burst`` is the share of the clients arriving together,
    ``dp`` and ``dp_wait`` the prefill pool's balancing attention-DP ranks and iterations, ``tokens`` the decodes'
    tokens per iteration (as aggregated)."""
    isl = np.asarray(isl, dtype=float)
    osl = np.asarray(osl, dtype=float)
    ctx = isl + osl / 2.0
    gen = np.maximum(osl - 1.0, 1e-9)
    ranks = np.maximum(decode_ranks, 1.0)
    p_ranks = np.maximum(prefill_ranks, 1.0)
    clients_all = np.asarray(clients, dtype=float)
    clients = _admitted(clients_all / ranks, max_running) * ranks
    zero = np.zeros_like(isl)
    service, _ = _prefill_cost(pre, isl, budget, zero, zero, zero)
    # an iteration of a prefill rank with nothing to run (its balancing counts those while it waits)
    idle_step = pre(zero, zero, zero, zero, zero)
    # partly synchronised arrivals (as aggregated, own share): a request waits for half the prefills of the
    # burst × (C − 1) arriving with it, spread over the prefill ranks
    together = burst * np.maximum(clients - 1.0, 0.0) * 0.5 * service / p_ranks

    def state(b: Arr) -> tuple[Arr, Arr, Arr]:
        tau = dec(b, ctx, zero, zero, b)
        lam = b * ranks / (gen * tau)
        rho = np.minimum(lam / p_ranks * service, _RHO_MAX)
        wait = rho * service / (2.0 * (1.0 - rho))
        # the prefill worker's API server sees the requests at that rank: λ / ranks × (W + S) of them (Little)
        front = frontend_s + inflight_s * (1.0 + lam / p_ranks * (wait + service))
        balance = balance_wait(dp, dp_wait, idle_step, lam / p_ranks)
        return lam, front + together + wait + service + transfer_s + balance + sched_iters * tau * tokens, tau

    def excess(b: Arr) -> Arr:
        lam, ttft, _ = state(b)
        return lam * ttft + b * ranks - clients

    b = _bisect(excess, clients / ranks)
    lam, ttft, tau = state(b)
    return ttft + _queued(clients_all, clients, lam), tau


def balance_wait(dp: Arr, iters: Arr, step: Arr, lam: Arr, clients: Arr | None = None) -> Arr:
    """Mean wait of a prompt at a rank of ``dp`` attention-DP ranks that balance their context requests, s.

    The engine holds a context request until every rank has one or ``iters`` iterations of ``step`` seconds have
    passed: the wait is the smaller of the cap ``iters × step`` and the time until the other ``dp − 1`` ranks,
    each receiving prompts at ``lam`` per second, have all received one (the expected maximum of ``dp − 1``
    exponential waits, ``H(dp − 1) / lam``), combined harmonically so that the fit sees a smooth function. 0 where
    ``dp`` is 1. With ``clients`` (a rank's closed-loop clients), times the chance that another request decodes on
    the arrival's rank, ``clip(clients − 1, 0, 1)``: TensorRT-LLM lets context requests in at once when some rank
    has none decoding.
    """
    dp = np.asarray(dp, dtype=float)
    others = np.maximum(dp - 1.0, 1.0)
    harmonic = np.log(others) + _EULER + 0.5 / others  # H(m) ≈ ln m + γ + 1/2m
    fill = harmonic / np.maximum(lam, 1e-12)
    cap = iters * step
    wait = 1.0 / (1.0 / np.maximum(cap, 1e-12) + 1.0 / np.maximum(fill, 1e-12))
    if clients is not None:
        wait = wait * np.clip(np.asarray(clients, dtype=float) - 1.0, 0.0, 1.0)
    return np.where(dp > 1.0, wait, 0.0)


def batch_wait(iters: Arr, threshold: Arr, b: Arr, isl: Arr, step: Arr, lam: Arr) -> Arr:
    """Mean wait of a prompt at an engine that batches its context requests (TensorRT-LLM's
    ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio``), s.

    While requests decode, the engine holds arriving prompts until the tokens of its next step — the held prompts'
    plus one per decode (``b``) — reach ``threshold`` (the ratio × its token budget), or it has held them ``iters``
    iterations of ``step`` seconds. The first prompt of a batch waits the smaller of the cap and the time until the
    ``(threshold − b) / isl − 1`` further prompts arrive at ``lam`` per second (combined harmonically, as
    :func:`balance_wait`); the ``lam × W`` arriving while it waits wait half as long on average. 0 where ``iters``
    or ``threshold`` is 0 (no waiting) or the decodes alone fill the threshold.
    """
    iters = np.asarray(iters, dtype=float)
    others = np.maximum((np.asarray(threshold, dtype=float) - b) / np.maximum(isl, 1.0) - 1.0, 0.0)
    cap = iters * step
    fill = others / np.maximum(lam, 1e-12)
    first = 1.0 / (1.0 / np.maximum(cap, 1e-12) + 1.0 / np.maximum(fill, 1e-12))
    mean = first * (1.0 + 0.5 * lam * first) / (1.0 + lam * first)
    return np.where((iters > 0) & (others > 0), mean, 0.0)


def _admitted(clients: Arr, max_running: Arr | None) -> Arr:
    """Clients a rank serves at once: all of them, or the cap (the KV cache it holds)."""
    if max_running is None:
        return clients
    return np.minimum(clients, np.maximum(np.asarray(max_running, dtype=float), 1.0))


def _queued(clients: Arr, admitted: Arr, lam: Arr) -> Arr:
    """Mean wait for admission of the clients beyond the cap, by Little's law: ``(C − C_admitted) / λ``."""
    return np.where(clients > admitted, (clients - admitted) / np.maximum(lam, 1e-12), 0.0)
