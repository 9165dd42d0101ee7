"""How far to trust the simulator's step model: :func:`validate_step_model` — cross-validation on a corpus of measured
deployments (``silicon_dev.csv`` or a file with its columns), where nothing predicted was fitted on.

Each fold holds out whole configurations (model × GPU × engine × precision × mode), refits the step model's
coefficients on the rest — without the held-out rows and without the copies of their measurements that such exports
repeat under other parallel encodings — and predicts the held-out rows with the steady-state closed loop. Optionally
the plain roofline with its built-in efficiencies (the model before the trained one) predicts the same rows as a
baseline. ``benchmarks/sim_accuracy.py`` prints the errors per configuration, engine, GPU, family and load.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailscope.api._support import PathLike, public
from tailscope.errors import ConfigError

if TYPE_CHECKING:  # numpy and the fit load only when a validation runs
    import numpy as np

    from tailscope.engine.fit import Observation
    from tailscope.io.corpus import CorpusRow

#: ``progress=``: called after each fold with (folds done, folds in all, rows held out in that fold, its fit seconds)
FoldProgress = Callable[[int, int, int, float], None]


@dataclass(frozen=True, slots=True)
class HeldOutRow:
    """One measured row of the corpus and what the step model predicted for it without having seen it.

    Attributes:
        id: the corpus row id.
        model, gpu, engine, precision: the deployment (catalog aliases, ``vllm``/``sglang``/``trtllm``, weights).
        mode: ``agg`` (one pool) or ``disagg`` (prefill and decode pools).
        input_tokens, output_tokens, concurrency: the closed-loop workload measured.
        measured_ttft_ms, measured_tpot_ms: the measured means.
        predicted_ttft_ms, predicted_tpot_ms: the cross-validated prediction (coefficients fitted without this
            row's configuration); None when the row was in no evaluated fold (``max_folds``).
        baseline_ttft_ms, baseline_tpot_ms: the plain roofline's prediction (aggregated rows, ``baseline=True``).
        simulate_options: the keywords of :func:`tailscope.simulate` that run this row's deployment and workload
            (a disaggregated row's pools as ``disagg``). Add ``requests=``/``warmup=`` to size the run.
        workers: where the row's worker counts come from: ``recorded`` in the corpus (every aggregated row, and the
            disaggregated rows that record them), ``duplicate`` (copied from a recorded row carrying the same
            measurement), ``recipe`` (the deployment its public recipe states) or ``imputed`` (the recorded rows'
            typical deployment) — the corpus rules of ``tailscope/io/corpus.py`` (rules 5 and 10).
        spec: the run's speculative decoding as its public recipe states it, aggregated or disaggregated: ``none``,
            ``mtp`` (priced with its draft tokens where the recipe names them) or ``unknown``; empty where no recipe
            is known (rule 10).
    """

    id: str
    model: str
    gpu: str
    engine: str
    precision: str
    mode: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    measured_ttft_ms: float
    measured_tpot_ms: float
    predicted_ttft_ms: float | None
    predicted_tpot_ms: float | None
    baseline_ttft_ms: float | None
    baseline_tpot_ms: float | None
    simulate_options: dict[str, Any] | None
    workers: str
    spec: str = ""

    @property
    def configuration(self) -> tuple[str, str, str, str, str]:
        """(model, gpu, engine, precision, mode): the unit a fold holds out."""
        return (self.model, self.gpu, self.engine, self.precision, self.mode)


@dataclass(frozen=True, slots=True)
class StepModelValidation:
    """The result of :func:`validate_step_model`.

    Attributes:
        corpus: the corpus file.
        folds: ``"loco"`` (leave one configuration out) or the number of folds, as asked.
        folds_run: folds evaluated (all, or ``max_folds``).
        rows: every corpus row, in file order, with its predictions.
        seconds: wall seconds of the whole validation.
    """

    corpus: str
    folds: str
    folds_run: int
    rows: tuple[HeldOutRow, ...]
    seconds: float

    def mape(self, which: str = "predicted", *, mode: str | None = None) -> tuple[float, float]:
        """Mean ``|predicted / measured − 1|`` of TTFT and TPOT over the rows with a ``which`` prediction
        (``predicted`` or ``baseline``), of one ``mode`` or all; NaN when there is none."""
        pairs = [
            (getattr(r, f"{which}_ttft_ms") / r.measured_ttft_ms, getattr(r, f"{which}_tpot_ms") / r.measured_tpot_ms)
            for r in self.rows
            if getattr(r, f"{which}_ttft_ms") is not None and (mode is None or r.mode == mode)
        ]
        if not pairs:
            return float("nan"), float("nan")
        return (sum(abs(a - 1) for a, _ in pairs) / len(pairs), sum(abs(b - 1) for _, b in pairs) / len(pairs))


# ---- the folds (module level: a process pool pickles them) ----------------------------------------------------------
_STATE: dict[str, Any] = {}


def _load(path: str) -> None:
    from tailscope.io.corpus import duplicate_groups, load_corpus, observations

    rows = load_corpus(path)
    _STATE.update(path=path, rows=rows, obs=observations(rows), dups=list(duplicate_groups(rows).values()))


def _fold(held: list[int]) -> tuple[list[int], list[float], list[float], float]:
    """Fit without ``held`` (and every copy of its measurements), predict ``held`` (seconds)."""
    from tailscope.engine.fit import Dataset, fit, predict

    obs: list[Observation] = _STATE["obs"]
    held_set = set(held)
    train = [group[0] for group in _STATE["dups"] if not held_set.intersection(group)]
    t0 = time.perf_counter()
    res = fit(Dataset([obs[i] for i in train]))
    test = Dataset([obs[i] for i in held])
    ttft, tpot = predict(test, res.params.design(test), res.theta)
    return held, [float(x) for x in ttft], [float(x) for x in tpot], time.perf_counter() - t0


def _groups(rows: Sequence[CorpusRow], folds: str) -> list[list[int]]:
    by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_key[r.config_key].append(i)
    groups = list(by_key.values())
    if folds == "loco":
        return groups
    k = int(folds)
    merged: list[list[int]] = [[] for _ in range(min(k, len(groups)))]
    for j, g in enumerate(sorted(groups, key=len, reverse=True)):
        merged[j % len(merged)].extend(g)
    return merged


def _baseline(rows: Sequence[CorpusRow], obs: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
    """The plain roofline (built-in efficiencies) in the same closed loop; aggregated rows only (it has no
    disaggregation), a worker's GPUs as tensor parallelism (it has no expert or attention DP)."""
    import numpy as np

    from tailscope.engine.closed_loop import aggregated
    from tailscope.engine.engine_profiles import engine_profile
    from tailscope.engine.perf import StepTimeModel

    ttft = np.full(len(rows), np.nan)
    tpot = np.full(len(rows), np.nan)
    for i, (r, o) in enumerate(zip(rows, obs, strict=True)):
        if r.agg is None:
            continue
        m = StepTimeModel(o.model, o.gpu, tp=r.agg.gpus, weights_dtype=r.precision, kv_dtype=r.kv_dtype)

        def step(n: Any, ctx: Any, chunk: Any, done: Any, logits: Any, m: StepTimeModel = m) -> Any:
            out = np.empty(np.shape(n))
            for j in range(out.size):
                pre = [(int(chunk[j]), int(done[j]))] if chunk[j] > 0 else []
                out[j] = m.step_s(pre, float(n[j]), float(n[j] * ctx[j]), float(logits[j]))  # type: ignore[arg-type]
            return out

        _, budget = engine_profile("vllm").limits(o.gpu)
        eff = m.eff
        a, b = aggregated(
            step,
            np.array([float(r.isl)]),
            np.array([float(r.osl)]),
            np.array([float(r.concurrency)]),
            np.array([float(budget)]),
            np.array([eff.frontend_ms / 1e3]),
            np.array([eff.frontend_per_inflight_us / 1e6]),
        )
        ttft[i], tpot[i] = a[0], b[0]
    return ttft, tpot


def _simulate_options(r: CorpusRow) -> dict[str, Any] | None:
    """The row's deployment and workload as :func:`tailscope.simulate` keywords — with the KV memory the analysis
    sizes its admission by (``io/corpus.py`` rule 7, as the row's ``sim`` flags): left at the default 0.9 of all
    memory the KV cache of DeepSeek-V3 in FP8 on four B200s (TensorRT-LLM) held a few of 16 requests of 9,216 tokens,
    and the simulated TTFT was 55 s against 565 ms analytic and 653 ms measured."""
    from tailscope.engine.fit import corpus_kv_fraction

    p = r.agg
    spec = {"spec_draft": r.spec_draft, "spec_accept": r.spec_accept()} if r.spec_draft else {}
    spec |= r.launch.simulate_options()  # the launch script's scheduler settings (rule 10)
    pools: dict[str, Any]
    if p is None:  # prefill and decode pools, each with its own parallelism (the row's sim flags)
        flags = r.sim_flags()
        pools = {"disagg": flags[flags.index("--disagg") + 1]}
    else:
        pools = {"tp": p.tp, "replicas": p.workers, "ep": p.ep, "attention_dp": p.attention_dp}
    return {
        "model": r.model, "gpu": r.system, "engine": r.engine, **pools, "weights_dtype": r.precision,
        "kv_dtype": r.kv_dtype, "gpu_memory_utilization": corpus_kv_fraction(r.engine),
        "concurrency": r.concurrency, "input_tokens": str(r.isl), "output_tokens": str(r.osl), **spec,
    }  # fmt: skip


def _ms(x: float) -> float | None:
    return None if x != x else x * 1e3  # NaN: no prediction


def _held_out(r: CorpusRow, ttft: float, tpot: float, base_ttft: float, base_tpot: float) -> HeldOutRow:
    """A row with its predictions (seconds; NaN = none)."""
    return HeldOutRow(
        id=r.id, model=r.model, gpu=r.system, engine=r.engine, precision=r.precision, mode=r.mode, input_tokens=r.isl,
        output_tokens=r.osl, concurrency=r.concurrency, measured_ttft_ms=r.ttft_ms, measured_tpot_ms=r.tpot_ms,
        predicted_ttft_ms=_ms(ttft), predicted_tpot_ms=_ms(tpot), baseline_ttft_ms=_ms(base_ttft),
        baseline_tpot_ms=_ms(base_tpot), simulate_options=_simulate_options(r), workers=r.workers, spec=r.spec,
    )  # fmt: skip


@public
def validate_step_model(
    corpus: PathLike,
    *,
    folds: str | int = "loco",
    jobs: int = 1,
    max_folds: int | None = None,
    baseline: bool = False,
    progress: FoldProgress | None = None,
) -> StepModelValidation:
    """Cross-validate the simulator's step model on a corpus of measured deployments.

    Args:
        corpus: a CSV with the columns of ``silicon_dev.csv`` (one closed-loop measurement per row).
        folds: ``"loco"`` — one fold per configuration (the figure the docs quote) — or K: K folds of whole
            configurations (faster, for development).
        jobs: processes fitting folds in parallel (each fit uses about one core).
        max_folds: evaluate only the first N folds (a quick look; the other rows get no prediction).
        baseline: also predict the aggregated rows with the plain roofline and its built-in efficiencies.
        progress: called after each fold with (folds done, folds in all, rows held out, fit seconds).

    Returns:
        Every row with its measured and predicted TTFT/TPOT (ms), the ``simulate()`` keywords of its deployment, and
        :meth:`StepModelValidation.mape`.

    Raises:
        ConfigError: a bad corpus (file, line and column named) or option.
    """
    folds_text = str(folds)
    if folds_text != "loco" and not (folds_text.isdigit() and int(folds_text) >= 2):
        raise ConfigError(f"folds must be 'loco' or a number ≥ 2 (got {folds!r})")
    if jobs < 1:
        raise ConfigError(f"jobs must be ≥ 1 (got {jobs})")
    if max_folds is not None and max_folds < 1:
        raise ConfigError(f"max_folds must be ≥ 1 (got {max_folds})")
    import numpy as np

    t0 = time.perf_counter()
    path = os.fspath(corpus)
    _load(path)
    rows: list[CorpusRow] = _STATE["rows"]
    if not rows:
        raise ConfigError(f"{path}: no rows to validate on")
    groups = _groups(rows, folds_text)[: max_folds if max_folds is not None else None]
    ttft = np.full(len(rows), np.nan)
    tpot = np.full(len(rows), np.nan)

    def take(done: int, out: tuple[list[int], list[float], list[float], float]) -> None:
        held, a, b, secs = out
        ttft[held], tpot[held] = a, b
        if progress is not None:
            progress(done, len(groups), len(held), secs)

    if jobs == 1 or len(groups) == 1:
        for n, g in enumerate(groups, 1):
            take(n, _fold(g))
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=_load, initargs=(path,)) as pool:
            for n, fold in enumerate(pool.map(_fold, groups), 1):
                take(n, fold)
    base_ttft = base_tpot = np.full(len(rows), np.nan)
    if baseline:
        base_ttft, base_tpot = _baseline(rows, _STATE["obs"])
    held_out = tuple(_held_out(r, float(ttft[i]), float(tpot[i]), float(base_ttft[i]), float(base_tpot[i]))
                for i, r in enumerate(rows))  # fmt: skip
    _STATE.clear()
    return StepModelValidation(
        corpus=path, folds=folds_text, folds_run=len(groups), rows=held_out, seconds=time.perf_counter() - t0
    )


@dataclass(frozen=True, slots=True)
class Repeatability:
    """How well a corpus's own repeat measurements agree: the error of predicting each from the others, no model.

    A *repeat* is a measurement of a deployment and workload the corpus describes more than once with other values —
    everything the step model is given identical (model, GPU, engine, precision, mode, lengths, concurrency, the
    pools' parallelism and workers, speculative decoding, launch settings) and, with ``same_version``, the engine
    version too. The export's copies of one measurement under other names carry the same values (to the µs) and
    count once. Only rows whose pools' worker counts the corpus records take part: rows whose deployment is imputed
    or taken from a recipe may differ in what the corpus does not say, and would read as disagreeing repeats.

    Attributes:
        mode: ``agg`` or ``disagg``.
        same_version: repeats of one engine version only (else across versions: the software moved in between).
        groups: deployments × workloads measured more than once.
        measurements: the distinct measurements in those groups.
        ttft_mape, tpot_mape: mean ``|median of the others / this − 1|`` over the measurements — what a model
            that knew every other run of the same setup would score on them: the floor, on such rows, under the
            MAPE of any model given what the corpus says (run-to-run noise, and settings the corpus does not
            record, both count). NaN with no repeats.
        ttft_median, tpot_median: the median of the same errors.
        row_ids: the corpus rows of those groups (the export's copies included), to score a model on the same rows.
    """

    mode: str
    same_version: bool
    groups: int
    measurements: int
    ttft_mape: float
    tpot_mape: float
    ttft_median: float
    tpot_median: float
    row_ids: tuple[str, ...] = ()


@public
def measurement_repeatability(corpus: PathLike) -> tuple[Repeatability, ...]:
    """How far the corpus's repeat measurements of one setup disagree (see :class:`Repeatability`): aggregated and
    disaggregated rows, each within one engine version and across versions — the noise floor the cross-validated
    MAPE of :func:`validate_step_model` is to be read against.

    Raises:
        ConfigError: a bad corpus (file, line and column named).
    """
    from tailscope.io.corpus import load_corpus

    rows = [r for r in load_corpus(os.fspath(corpus)) if r.workers == "recorded"]
    return tuple(
        _repeatability(rows, mode, same_version) for mode in ("agg", "disagg") for same_version in (True, False)
    )


def _repeatability(rows: Sequence[CorpusRow], mode: str, same_version: bool) -> Repeatability:
    import statistics

    groups: dict[tuple[Any, ...], set[tuple[float, float]]] = defaultdict(set)
    ids: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for r in rows:
        if r.mode == mode:
            setup = (r.model, r.system, r.engine, r.precision, r.isl, r.osl, r.concurrency, r.agg, r.prefill, r.decode)
            key = (*setup, r.spec, r.spec_draft, r.launch, r.engine_version if same_version else "")
            groups[key].add((round(r.ttft_ms, 3), round(r.tpot_ms, 3)))  # the export's copies differ in the last bit
            ids[key].append(r.id)
    err_ttft: list[float] = []
    err_tpot: list[float] = []
    repeated = [k for k, v in groups.items() if len(v) > 1]
    for values in (sorted(groups[k]) for k in repeated):
        for i, (ttft, tpot) in enumerate(values):
            others = values[:i] + values[i + 1 :]
            err_ttft.append(abs(statistics.median(o[0] for o in others) / ttft - 1))
            err_tpot.append(abs(statistics.median(o[1] for o in others) / tpot - 1))

    def mean(e: list[float]) -> float:
        return statistics.fmean(e) if e else float("nan")

    def median(e: list[float]) -> float:
        return statistics.median(e) if e else float("nan")

    return Repeatability(
        mode=mode,
        same_version=same_version,
        groups=len(repeated),
        measurements=len(err_ttft),
        ttft_mape=mean(err_ttft),
        tpot_mape=mean(err_tpot),
        ttft_median=median(err_ttft),
        tpot_median=median(err_tpot),
        row_ids=tuple(i for k in repeated for i in ids[k]),
    )
