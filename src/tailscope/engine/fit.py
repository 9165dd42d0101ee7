"""Fitting the step model's coefficients to closed-loop measurements (pure numpy).

The coefficients (:class:`~tailscope.engine.step_terms.Efficiencies`) are shared across models and GPUs and vary
by engine and precision class through a hierarchy, on a transformed scale (logit for the fractions of a peak, log
for times)::

    x[field](engine, class) = base[field] + by_engine[engine][field]
                              + by_class[class][field] + by_both[engine, class][field]      (GEMM)
    x[field](engine, class) = base[field] + by_engine[engine][field] + by_class[class][field]  (MoE, memory)
    x[field](engine, class) = base[field] + by_engine[engine][field]                          (the rest)

Every offset is pulled toward 0 (a ridge penalty), the bases weakly toward the physical defaults, so an engine or a
precision the data hardly shows falls back on what the others say. The loss is the Huber loss of the relative
error ``predicted / measured − 1`` for TTFT and for TPOT of every observation — nearly absolute beyond 10 %, so what
is minimised is close to the MAPE the model is judged by — weighted ``1 / √rows`` of its configuration, so large
sweeps do not drown small ones, minimised by Levenberg–Marquardt with a finite-difference
Jacobian that evaluates each parameter only on the rows it touches. Predictions come from the steady-state closed
loop (:mod:`tailscope.engine.closed_loop`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

import numpy as np

from tailscope.engine import closed_loop
from tailscope.engine.disagg import kv_link_bytes_per_s
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.launch import NOT_SET, LaunchSettings
from tailscope.engine.models import ModelArch
from tailscope.engine.step_model import TrainedStepModel, precision_class
from tailscope.engine.step_terms import Efficiencies, Parallelism, StepTerms, coefficients, step_terms
from tailscope.errors import TailscopeError

ENGINES = ("vllm", "sglang", "trtllm")
CLASSES = ("bf16", "fp8", "fp4", "int4")
FIELDS = Efficiencies.names()
#: fractions of a peak (logit scale); the other fields are positive times (log scale)
FRACTIONS = frozenset({"gemm", "moe", "attn", "mem", "comm", "kv_xfer", "burst", "pd_burst", "spec_accept"})
#: fields that also vary by precision class, and by engine and class together
BY_CLASS = frozenset({"gemm", "moe", "mem"})
BY_BOTH = frozenset({"gemm"})
#: fields whose engine offsets are penalised only as weakly as the bases: engine scheduling policies that one
#: engine has and another has not (TensorRT-LLM's attention-DP balancing, SGLang's input cadence), not efficiencies
#: that engines share
ENGINE_OWN = frozenset({"dp_wait", "sched_iters"})
_DEFAULT = Efficiencies()
#: the share of GPU memory the corpus' vLLM and SGLang deployments give weights and KV cache (the rows' ``sim`` flags
#: say the same)
KV_MEMORY_UTILIZATION = 0.95


def corpus_kv_fraction(engine: str) -> float:
    """The ``--gpu-memory-utilization`` a corpus row of ``engine`` runs with (``io/corpus.py`` rule 7): TensorRT-LLM's
    own default, 0.9 of the memory the weights leave (:attr:`~tailscope.engine.engine_profiles.EngineProfile.
    kv_of_free_memory`); :data:`KV_MEMORY_UTILIZATION` of all memory for the others."""
    return 0.9 if engine_profile(engine).kv_of_free_memory else KV_MEMORY_UTILIZATION


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool of a measured deployment: parallelism per worker and workers."""

    par: Parallelism
    workers: int = 1


@dataclass(frozen=True, slots=True)
class Observation:
    """One closed-loop measurement: the deployment, the workload and the mean latencies (seconds).

    ``agg`` for an aggregated deployment, ``prefill`` and ``decode`` for a disaggregated one.
    """

    model: ModelArch
    gpu: GpuSpec
    engine: str
    weights_dtype: str
    kv_dtype: str
    isl: int
    osl: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    agg: Pool | None = None
    prefill: Pool | None = None
    decode: Pool | None = None
    group: int = 0  # configuration index (for weights and cross-validation)
    spec_draft: int = 0  # draft tokens of a speculatively decoded (MTP) run; 0 without
    launch: LaunchSettings = NOT_SET  # the scheduler settings its launch script gave the server


def _stack(terms: Sequence[StepTerms]) -> SimpleNamespace:
    return SimpleNamespace(**{f.name: np.array([getattr(t, f.name) for t in terms]) for f in fields(StepTerms)})


class Dataset:
    """Observations turned into arrays once (the physics does not change while the coefficients are fitted)."""

    def __init__(self, obs: Sequence[Observation]) -> None:
        self.obs = list(obs)
        n = len(self.obs)
        self.n = n
        cache: dict[tuple[Any, ...], StepTerms] = {}

        def terms(o: Observation, p: Pool) -> StepTerms:
            key = (o.model.name, o.gpu.id, p.par, o.weights_dtype, o.kv_dtype)
            if key not in cache:
                cache[key] = step_terms(o.model, o.gpu, p.par, weights_dtype=o.weights_dtype, kv_dtype=o.kv_dtype)
            return cache[key]

        main: list[StepTerms] = []
        pre: list[StepTerms] = []
        self.disagg = np.zeros(n, dtype=bool)
        self.isl = np.array([o.isl for o in self.obs], dtype=float)
        self.osl = np.array([o.osl for o in self.obs], dtype=float)
        self.clients = np.zeros(n)
        self.prefill_ranks = np.ones(n)
        self.decode_ranks = np.ones(n)
        self.budget = np.zeros(n)
        self.kv_bytes = np.zeros(n)
        self.kv_link = np.ones(n)
        #: requests one rank (the decode rank, disaggregated) holds at once: its KV cache at the mean context
        self.max_running = np.zeros(n)
        #: attention-DP ranks that balance their context requests (the engine's policy; 1 = no balancing wait),
        #: of the aggregated (or decode) pool and of the prefill pool
        self.balance_main = np.ones(n)
        #: the balancing's timeout in iterations where the run's launch script says (NaN: learned, ``dp_wait``)
        self.balance_iters = np.full(n, np.nan)
        self.balance_pre = np.ones(n)
        #: batch waiting (aggregated pools): iterations at most, and the share of the budget that ends it
        self.wait_iters = np.zeros(n)
        self.wait_ratio = np.zeros(n)
        kv_cache: dict[tuple[Any, ...], float] = {}

        def kv_tokens(o: Observation, p: Pool) -> float:
            key = (o.model.name, o.gpu.id, p.par, o.weights_dtype, o.kv_dtype, o.engine)
            if key not in kv_cache:
                try:
                    m = TrainedStepModel(
                        o.model, o.gpu, p.par, weights_dtype=o.weights_dtype, kv_dtype=o.kv_dtype, efficiency=_DEFAULT,
                        engine=o.engine,
                    )  # fmt: skip
                    kv_cache[key] = float(m.kv_capacity_tokens(corpus_kv_fraction(o.engine)))
                except TailscopeError:
                    kv_cache[key] = float("inf")
            return kv_cache[key]

        for i, o in enumerate(self.obs):
            pool = o.agg if o.agg is not None else o.decode
            assert pool is not None
            self.max_running[i] = kv_tokens(o, pool) / (o.isl + o.osl / 2.0)
            profile = engine_profile(o.engine)
            _, budget = profile.limits(o.gpu)
            launch = o.launch
            self.budget[i] = launch.max_num_tokens or budget
            if pool.par.attention_dp == 1:  # TensorRT-LLM waits only without attention DP
                self.wait_iters[i], self.wait_ratio[i] = launch.batch_wait_iters, launch.batch_wait_ratio
            if launch.max_running:  # the launch script's cap, shared by the attention-DP ranks
                self.max_running[i] = min(self.max_running[i], launch.max_running / pool.par.attention_dp)
            if profile.attention_dp_balance:
                self.balance_main[i] = pool.par.attention_dp
                self.balance_pre[i] = (o.prefill or pool).par.attention_dp
                if launch.dp_balance_iters is not None:
                    self.balance_iters[i] = launch.dp_balance_iters
                    if launch.dp_balance_iters == 0:
                        self.balance_main[i] = 1.0
            if o.agg is not None:
                main.append(terms(o, o.agg))
                pre.append(main[-1])
                ranks = o.agg.workers * o.agg.par.attention_dp
                self.clients[i] = o.concurrency / ranks
            else:
                assert o.prefill is not None
                assert o.decode is not None
                self.disagg[i] = True
                main.append(terms(o, o.decode))
                pre.append(terms(o, o.prefill))
                self.prefill_ranks[i] = o.prefill.workers * o.prefill.par.attention_dp
                self.decode_ranks[i] = o.decode.workers * o.decode.par.attention_dp
                self.clients[i] = o.concurrency
                self.kv_bytes[i] = o.isl * o.model.kv_bytes_per_token(o.kv_dtype)
                self.kv_link[i] = kv_link_bytes_per_s(o.gpu, o.prefill.par.gpus, o.decode.par.gpus)
        self.main = _stack(main)
        self.pre = _stack(pre)
        self.engine = np.array([ENGINES.index(o.engine) for o in self.obs])
        self.klass = np.array([CLASSES.index(precision_class(o.weights_dtype, o.gpu)) for o in self.obs])
        self.ttft = np.array([o.ttft_s for o in self.obs])
        self.tpot = np.array([o.tpot_s for o in self.obs])
        self.group = np.array([o.group for o in self.obs])
        self.spec_k = np.array([float(o.spec_draft) for o in self.obs])

    def subset(self, idx: np.ndarray) -> Dataset:
        """The rows ``idx`` (arrays sliced, nothing recomputed)."""
        out = object.__new__(Dataset)
        out.obs = [self.obs[i] for i in idx]
        out.n = len(idx)
        for name, value in vars(self).items():
            if name in ("obs", "n"):
                continue
            if isinstance(value, SimpleNamespace):
                setattr(out, name, SimpleNamespace(**{k: v[idx] for k, v in vars(value).items()}))
            else:
                setattr(out, name, value[idx])
        return out


# ---- the parameter vector ------------------------------------------------------------------------------------
class Params:
    """Layout of the hierarchical parameter vector and its transform to per-row coefficients."""

    def __init__(self) -> None:
        names: list[tuple[str, str, str, str]] = []  # (level, engine, class, field)
        for f in FIELDS:
            names.append(("base", "", "", f))
        for e in ENGINES:
            for f in FIELDS:
                names.append(("engine", e, "", f))
        for k in CLASSES:
            for f in FIELDS:
                if f in BY_CLASS:
                    names.append(("class", "", k, f))
        for e in ENGINES:
            for k in CLASSES:
                for f in FIELDS:
                    if f in BY_BOTH:
                        names.append(("both", e, k, f))
        self.names = names
        self.size = len(names)
        self.prior = np.array([_to_x(f, getattr(_DEFAULT, f)) if lvl == "base" else 0.0 for lvl, _, _, f in names])

    def design(self, ds: Dataset) -> dict[str, np.ndarray]:
        """Per field, the indices (rows × 4) of the parameters that add up to the field's transformed value on each
        row; index ``size`` stands for a parameter that is not there (θ is extended with a 0)."""
        out: dict[str, np.ndarray] = {}
        for f in FIELDS:
            idx = np.full((ds.n, 4), self.size, dtype=np.intp)
            for j, (lvl, e, k, g) in enumerate(self.names):
                if g != f:
                    continue
                if lvl == "base":
                    idx[:, 0] = j
                elif lvl == "engine":
                    idx[ds.engine == ENGINES.index(e), 1] = j
                elif lvl == "class":
                    idx[ds.klass == CLASSES.index(k), 2] = j
                else:
                    idx[(ds.engine == ENGINES.index(e)) & (ds.klass == CLASSES.index(k)), 3] = j
            out[f] = idx
        return out

    def efficiencies(self, theta: np.ndarray, engine: str, klass: str) -> Efficiencies:
        """The coefficients θ gives ``(engine, class)``."""
        values = {}
        for f in FIELDS:
            x = 0.0
            for j, (lvl, e, k, g) in enumerate(self.names):
                if g != f:
                    continue
                if (
                    lvl == "base"
                    or (lvl == "engine" and e == engine)
                    or (lvl == "class" and k == klass)
                    or (lvl == "both" and e == engine and k == klass)
                ):
                    x += theta[j]
            values[f] = float(_from_x(f, np.float64(x)))
        return Efficiencies(**values)


def _to_x(field: str, value: float) -> float:
    if field in FRACTIONS:
        return float(np.log(value / (1.0 - value)))
    return float(np.log(value))


def _from_x(field: str, x: Any) -> Any:
    if field in FRACTIONS:
        return 1.0 / (1.0 + np.exp(-x))
    return np.exp(x)


# ---- prediction ---------------------------------------------------------------------------------------------
def predict(ds: Dataset, design: dict[str, np.ndarray], theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(TTFT, TPOT)`` in seconds for every row of ``ds`` under θ."""
    ext = np.append(theta, 0.0)
    e = SimpleNamespace(**{f: _from_x(f, ext[design[f]].sum(axis=1)) for f in FIELDS})
    ttft = np.zeros(ds.n)
    tpot = np.zeros(ds.n)
    front = e.frontend_ms * 1e-3 + e.token_us * 1e-6 * ds.isl  # the front end, its per-prompt-token part included
    inflight = e.inflight_us * 1e-6
    agg = ~ds.disagg
    if agg.any():
        a = np.flatnonzero(agg)
        c = coefficients(_rows(ds.main, a), _rows(e, a))
        step = closed_loop.coefficient_step(c)
        tokens_a: np.ndarray | float = 1.0
        if ds.spec_k[a].any():
            step = closed_loop.speculative_step(step, ds.spec_k[a], e.spec_accept[a])
            tokens_a = closed_loop.speculative_tokens(ds.spec_k[a], e.spec_accept[a])
        t1, tau = closed_loop.aggregated(
            step,
            ds.isl[a],
            ds.osl[a],
            ds.clients[a],
            ds.budget[a],
            front[a],
            inflight[a],
            e.burst[a],
            ds.max_running[a],
            ds.balance_main[a],
            np.where(np.isnan(ds.balance_iters[a]), e.dp_wait[a], ds.balance_iters[a]),
            e.sched_iters[a],
            tokens_a,
            ds.wait_iters[a],
            ds.wait_ratio[a],
        )
        ttft[a], tpot[a] = t1, tau
    if ds.disagg.any():
        d = np.flatnonzero(ds.disagg)
        ed = _rows(e, d)
        transfer = ed.kv_xfer_ms * 1e-3 + ds.kv_bytes[d] / (ds.kv_link[d] * ed.kv_xfer)
        decode = closed_loop.coefficient_step(coefficients(_rows(ds.main, d), ed))
        tokens_d: np.ndarray | float = 1.0
        if ds.spec_k[d].any():
            decode = closed_loop.speculative_step(decode, ds.spec_k[d], ed.spec_accept)
            tokens_d = closed_loop.speculative_tokens(ds.spec_k[d], ed.spec_accept)
        t1, tau = closed_loop.disaggregated(
            closed_loop.coefficient_step(coefficients(_rows(ds.pre, d), ed)),
            decode,
            ds.isl[d],
            ds.osl[d],
            ds.clients[d],
            ds.prefill_ranks[d],
            ds.decode_ranks[d],
            ds.budget[d],
            front[d],
            inflight[d],
            transfer,
            ds.max_running[d],
            ed.pd_burst,
            ds.balance_pre[d],
            ed.dp_wait,
            ed.sched_iters,
            tokens_d,
        )
        ttft[d], tpot[d] = t1, tau
    return ttft, tpot


def _rows(ns: SimpleNamespace, idx: np.ndarray) -> SimpleNamespace:
    return SimpleNamespace(**{k: v[idx] for k, v in vars(ns).items()})


# ---- fitting ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FitResult:
    """A fitted θ and how the fit went."""

    theta: np.ndarray
    params: Params
    loss: float
    iterations: int

    def efficiencies(self, engine: str, klass: str) -> Efficiencies:
        return self.params.efficiencies(self.theta, engine, klass)

    def table(self) -> dict[tuple[str, str], dict[str, float]]:
        """Every (engine, class) → coefficient → value, rounded for a reviewable data file."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for e in ENGINES:
            for k in CLASSES:
                eff = self.efficiencies(e, k)
                out[(e, k)] = {f: float(f"{getattr(eff, f):.4g}") for f in FIELDS}
        return out


def fit(
    ds: Dataset,
    *,
    ridge: float = 4.0,
    prior_weight: float = 0.05,
    huber: float = 0.1,
    iterations: int = 40,
    on_iteration: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Fit θ to ``ds`` (see the module docstring).

    Args:
        ridge: penalty weight on every engine/class offset (in units of one configuration's residuals).
        prior_weight: penalty weight pulling the bases toward the defaults.
        huber: the Huber threshold on the relative error (beyond it the loss grows linearly, as MAPE does).
        iterations: Levenberg–Marquardt rounds at most.
    """
    params = Params()
    design = params.design(ds)
    counts = np.bincount(ds.group)
    w_row = 1.0 / np.sqrt(counts[ds.group])
    w_row = w_row / w_row.mean()
    prior_w = np.array(
        [
            np.sqrt(prior_weight) if lvl == "base" or (lvl == "engine" and f in ENGINE_OWN) else np.sqrt(ridge)
            for lvl, _, _, f in params.names
        ]
    )
    touched = [
        np.flatnonzero(np.any([(design[f] == j).any(axis=1) for f in FIELDS], axis=0)) for j in range(params.size)
    ]
    meas = np.concatenate([ds.ttft, ds.tpot])
    w2 = np.concatenate([w_row, w_row])

    def residuals(theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Relative errors ``predicted / measured − 1`` (TTFT rows, then TPOT rows)."""
        if rows is None:
            t1, tau = predict(ds, design, theta)
            target = meas
        else:
            sd = {f: design[f][rows] for f in FIELDS}
            t1, tau = predict(ds.subset(rows), sd, theta)
            target = np.concatenate([ds.ttft[rows], ds.tpot[rows]])
        return np.asarray(np.concatenate([t1, tau]) / target - 1.0, dtype=float)

    def objective(r: np.ndarray, theta: np.ndarray) -> float:
        a = np.abs(r)
        h = np.where(a <= huber, 0.5 * a**2, huber * (a - 0.5 * huber))
        return float(np.sum(w2 * h) + 0.5 * np.sum((prior_w * (theta - params.prior)) ** 2))

    theta = params.prior.copy()
    r = residuals(theta)
    loss = objective(r, theta)
    lam = 1e-2
    it = 0
    loss_prev = loss
    for it in range(1, iterations + 1):
        jac = np.zeros((2 * ds.n, params.size))
        eps = 1e-4
        for j in range(params.size):
            rows = touched[j]
            if rows.size == 0:
                continue
            th = theta.copy()
            th[j] += eps
            rj = residuals(th, rows)
            base = np.concatenate([r[rows], r[ds.n + rows]])
            d = (rj - base) / eps
            jac[rows, j] = d[: rows.size]
            jac[ds.n + rows, j] = d[rows.size :]
        a = np.abs(r)
        irls = np.where(a <= huber, 1.0, huber / np.maximum(a, 1e-12)) * w2
        jw = jac * irls[:, None]
        g = jw.T @ r + prior_w**2 * (theta - params.prior)
        h = jac.T @ jw + np.diag(prior_w**2)
        improved = False
        for _ in range(8):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-9), -g)
            cand = theta + step
            rc = residuals(cand)
            lc = objective(rc, cand)
            if lc < loss:
                theta, r, loss_prev, loss = cand, rc, loss, lc
                lam = max(lam / 3.0, 1e-6)
                improved = True
                break
            lam *= 4.0
        if on_iteration is not None:
            on_iteration(it, loss)
        if not improved or (loss_prev - loss) < 2e-4 * max(loss, 1.0):
            break
    return FitResult(theta, params, loss, it)
