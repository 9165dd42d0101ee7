"""The calibration corpus (``silicon_dev.csv``): real closed-loop serving measurements, read into typed rows.

Each row is one benchmark point — a model served by one engine on one GPU type with a given parallelism, driven in a
closed loop at a fixed concurrency with fixed input and output lengths — with its mean TTFT and TPOT (columns in
``shared/calibration/README.md``). :func:`load_corpus` validates the CSV (pydantic, errors ``file:line: column``)
and :func:`row_from_record` turns each record into a :class:`CorpusRow` whose deployment is *normalised*: the
export writes the same parallelism in several encodings, and the rules below recover GPUs per worker, tensor
parallelism, attention data parallelism and expert parallelism from them. They are data cleaning, applied to every
row alike and never to fit a figure:

1. Concurrency is the ``silicon_concurrency=N`` of ``silicon_data_source``; rows without it (19) use
   ``batch_size × attention_dp``.
2. Rows of the ``2026_04_06_…_tpX_epY_N`` export multiply the parallel sizes into the columns (``tp8_ep8`` is
   written ``tp_size 64, moe_tp 8, moe_ep 8``; duplicates of the same measurement in the other exports say 8 GPUs):
   X GPUs, expert parallelism Y; attention DP over all X GPUs when the row's ``attention_dp_size`` > 1.
3. Elsewhere the same product encoding shows as ``tp_size = moe_tp × moe_ep`` with ``moe_tp = moe_ep`` ≥ 4 (GPUs =
   moe_tp; seen with 4 and 8), as ``attention_dp = moe_tp × moe_ep`` with ``tp_size`` 1 (likewise), or as
   ``moe_ep = tp × attention_dp`` with both > 1 (GPUs = tp_size); otherwise GPUs = ``tp_size × attention_dp_size``
   (a row with ``tp_size 8, moe_tp 2, moe_ep 4`` is 8 GPUs).
4. ``batch_size`` is per attention-DP rank: where ``concurrency / batch_size`` is an integer k > 1 and no attention
   DP is recorded, a dense model runs k replicas and an MoE model k attention-DP ranks (when k divides its GPUs).
5. Disaggregated rows without worker counts (1,009 of 1,224) take them from what the 215 rows that record them
   show. (a) A row that carries the very measurement of a recorded row (same TTFT and TPOT, GPU, engine, precision,
   lengths and concurrency, and the same architecture: 192 rows, all DeepSeek-R1 measurements repeated under
   DeepSeek-V3 or back) takes that row's pools, worker counts and parallelism alike. (b) The others get the
   recorded rows' typical deployment: one prefill worker up to 256 clients (137 of the 143 recorded rows there),
   two above (the median of the 72 recorded rows above 256 clients), and decode workers for
   ``max(min(C, 4), ⌈C / 64⌉)`` decode ranks (attention-DP ranks × workers): recorded rows run a median of 4 decode
   ranks from 5 to 64 clients, ≈ C/4 requests per rank up to 256 clients and a median of 78 above. Of the pairs
   (ranks at low load 1, 2, 4 or 8; requests per rank at most 32, 64, 128 or 256), (4, 64) reproduces the recorded
   rows' own decode ranks best. Applied to the recorded rows themselves, the rule is off by a mean
   |ln(imputed / recorded)| of 0.50 in decode ranks and 0.30 in prefill workers; the earlier rule (decode ranks to
   keep each within the engine's CUDA-graph batch, 128–512, and as many prefill as decode workers) by 0.82 and 0.45.
   One rule for every engine and model: the recorded rows are too few per engine to tell them apart.
6. An empty precision is the checkpoint's own; KV caches are FP8 for FP8 and FP4 rows and BF16 otherwise (the
   corpus does not record it).
7. Memory: the corpus' deployments give the KV cache what the weights leave (DeepSeek-V3 in FP8 runs on four B200s
   with a few GB to spare), so the rows' ``sim`` flags give ``--gpu-memory-utilization 0.95`` (of all memory) for vLLM
   and SGLang, and TensorRT-LLM's own default, 0.9 of the memory the weights leave
   (:func:`~tailscope.engine.fit.corpus_kv_fraction`).
8. A pool whose recorded GPUs cannot hold the weights (20 DeepSeek-R1 FP4 rows on one GB200) lost its parallelism
   in the export: it gets the smallest power of two of GPUs that holds them, as tensor (and expert) parallelism.
9. A tensor-parallel size that does not divide the model's attention heads cannot be tensor parallelism (DeepSeek-R1
   "TP 36" or "TP 72" on a GB200 NVL72): an MoE model's GPUs then run attention data parallelism with expert
   parallelism over all of them (wide EP). So does an MoE pool of more than 16 GPUs that records neither attention
   DP nor expert parallelism (the same export's DeepSeek-R1 "TP 32" and "TP 64" on GB200, in series with its TP
   12–52 rows, and two Kimi-K2.5 decode pools of 32: 8 pools of 6 rows): as tensor parallelism it would leave each
   GPU 2–4 of 64–128 heads and cut every expert 32–64 ways.
10. Rows of InferenceX's runs take what InferenceX's public configurations and launch scripts say of them:
    disaggregated deployments and speculative decoding, and the scheduler settings the server was launched with
    (:mod:`tailscope.io.corpus_recipes`). No measurement comes from there.
"""

from __future__ import annotations

import csv
import io as _io
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tailscope.engine.fit import Observation, Pool
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import get_model_entry
from tailscope.engine.step_terms import Parallelism
from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._schema import one_of
from tailscope.io.corpus_recipes import apply_recipes, recipes
from tailscope.io.corpus_row import CorpusRow, PoolDeployment

__all__ = [
    "ENGINES",
    "CorpusRow",
    "PoolDeployment",
    "duplicate_groups",
    "impute_workers",
    "load_corpus",
    "observations",
    "parse_corpus",
    "row_from_record",
]

ENGINES = ("vllm", "sglang", "trtllm")
_MODES = ("agg", "disagg")
_PRODUCT_ID = re.compile(r"^2026_04_06_.*_tp(\d+)_ep(\d+)_\d+$")
_CONC = re.compile(r"silicon_concurrency=(\d+)")


class _RecordM(BaseModel):
    """The columns we use; the rest are ignored (the CSV has provenance columns too)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    silicon_data_source: str
    backend: Annotated[str, one_of(ENGINES)]
    backend_version: str
    model_path: str
    system: str
    precision: str
    mode: Annotated[str, one_of(_MODES)]
    isl: int
    osl: int
    batch_size: str
    tp_size: str
    attention_dp_size: str
    moe_tp_size: str
    moe_ep_size: str
    prefill_batch_size: str
    prefill_num_workers: str
    prefill_tp_size: str
    prefill_attention_dp_size: str
    prefill_moe_tp_size: str
    prefill_moe_ep_size: str
    decode_batch_size: str
    decode_num_workers: str
    decode_tp_size: str
    decode_attention_dp_size: str
    decode_moe_tp_size: str
    decode_moe_ep_size: str
    silicon_ttft_ms: float
    silicon_tpot_ms: float

    @field_validator("isl", "osl")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be ≥ 1")
        return v

    @field_validator("silicon_ttft_ms", "silicon_tpot_ms")
    @classmethod
    def _positive_ms(cls, v: float) -> float:
        if not v > 0:
            raise ValueError("must be > 0")
        return v


def _int(text: str, default: int = 1) -> int:
    """A parallel-size column: empty or 0 means 1 (not used)."""
    try:
        v = int(float(text)) if text.strip() else 0
    except ValueError:
        return default
    return v if v > 0 else default


def _pool(r: _RecordM, prefix: str, concurrency: int | None, dense: bool, heads: int) -> PoolDeployment:
    """Rules 2–4 and 9 of the module docstring for one pool, from the record's columns named ``{prefix}tp_size``, …:
    prefix ``""`` for an aggregated deployment (no worker count column: one worker), ``prefill_`` or ``decode_``."""

    def col(name: str) -> str:
        return str(getattr(r, prefix + name))

    tp, adp, mtp, mep = (_int(col(c)) for c in ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"))
    batch = _int(col("batch_size"), 0) or None
    m = _PRODUCT_ID.match(r.id)
    if m is not None:  # rule 2
        gpus, ep = int(m.group(1)), int(m.group(2))
        adp = gpus if adp > 1 else 1
    elif mtp >= 4 and mtp == mep and adp == 1 and tp == mtp * mep:  # rule 3
        gpus, ep = mtp, mep
    elif mtp >= 4 and mtp == mep and tp == 1 and adp == mtp * mep:
        gpus, ep, adp = mtp, mep, mtp
    elif tp > 1 and adp > 1 and mtp == 1 and mep == tp * adp:
        gpus, ep = tp, tp
    else:
        gpus, ep = tp * adp, mep
    ep = max(1, min(ep, gpus))
    workers = _int(col("num_workers")) if prefix else 1
    if not dense and adp == 1 and gpus > 1 and (heads % gpus or (gpus > 16 and ep == 1)):  # rule 9
        return PoolDeployment(gpus, 1, gpus, gpus, workers, batch)
    if adp == 1 and concurrency and batch and concurrency > batch and concurrency % batch == 0:  # rule 4
        k = concurrency // batch
        if dense:  # a dense model: k data-parallel replicas of this size
            return PoolDeployment(gpus, gpus, 1, 1, workers * k, batch)
        if gpus % k == 0:
            adp = k
    adp = max(1, min(adp, gpus))
    if dense and adp > 1:  # attention DP of a dense model = independent replicas
        return PoolDeployment(gpus // adp, gpus // adp, 1, 1, workers * adp, batch)
    return PoolDeployment(gpus, gpus // adp, adp, ep if not dense else 1, workers, batch)


#: rule 5 (b): decode ranks at low load, requests per decode rank at most, clients up to which one prefill worker
IMPUTED_DECODE_RANKS = 4
IMPUTED_REQUESTS_PER_RANK = 64
IMPUTED_ONE_PREFILL_UP_TO = 256


def impute_workers(
    prefill: PoolDeployment, decode: PoolDeployment, concurrency: int
) -> tuple[PoolDeployment, PoolDeployment]:
    """Rule 5 (b): the worker counts of a disaggregated deployment that does not record them, from the recorded
    rows' typical deployment (module docstring)."""
    c = max(1, concurrency)
    ranks = max(min(c, IMPUTED_DECODE_RANKS), -(-c // IMPUTED_REQUESTS_PER_RANK))
    decode_workers = max(1, -(-ranks // decode.attention_dp))
    prefill_workers = 1 if c <= IMPUTED_ONE_PREFILL_UP_TO else 2
    return replace(prefill, workers=prefill_workers), replace(decode, workers=decode_workers)


def _fits(pool: PoolDeployment, weight_bytes: float, gpu_bytes: float, moe: bool) -> PoolDeployment:
    """Rule 8: enough GPUs for the weights (90 % of memory at most)."""
    if weight_bytes / pool.gpus <= 0.9 * gpu_bytes:
        return pool
    g = pool.gpus
    while weight_bytes / g > 0.9 * gpu_bytes and g < 1024:
        g *= 2
    return replace(pool, gpus=g, tp=g, attention_dp=1, ep=g if moe else 1)


def row_from_record(rec: dict[str, str], *, line: int, source: str = "silicon_dev.csv") -> CorpusRow:
    """Validate and normalise one CSV record.

    Raises:
        ConfigError: ``source:line: column message`` for a value that does not parse, or an unknown model/GPU.
    """
    try:
        r = _RecordM.model_validate(rec)
    except ValidationError as exc:
        err = exc.errors()[0]
        col = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{source}:{line}: {col} {err['msg'].removeprefix('Value error, ')}") from None
    try:
        entry = get_model_entry(r.model_path)
    except ConfigError as exc:
        raise ConfigError(f"{source}:{line}: model_path {exc}") from None
    arch = entry.arch()
    native = arch.default_weights_dtype
    precision = r.precision.strip().lower() or native
    if precision == "fp4" and native == "mxfp4":
        precision = "mxfp4"
    kv = "fp8" if precision in ("fp8", "fp4", "mxfp4") else "bf16"
    m = _CONC.search(r.silicon_data_source)
    conc = int(m.group(1)) if m else None
    dense = not arch.is_moe
    agg = prefill = decode = None
    workers = "recorded"
    if r.mode == "agg":
        agg = _pool(r, "", conc, dense, arch.heads)
        if conc is None:
            conc = (agg.batch or 1) * agg.attention_dp * agg.workers
    else:
        prefill = _pool(r, "prefill_", None, dense, arch.heads)
        decode = _pool(r, "decode_", None, dense, arch.heads)
        if conc is None:
            conc = (decode.batch or 1) * decode.attention_dp * decode.workers
        if not r.decode_num_workers.strip():  # rule 5 (b); (a) is applied over the whole corpus
            workers = "imputed"
            prefill, decode = impute_workers(prefill, decode, conc)
    wbytes = arch.weight_bytes(precision)
    mem = resolve_gpu(r.system).memory_bytes
    agg = _fits(agg, wbytes, mem, not dense) if agg is not None else None
    prefill = _fits(prefill, wbytes, mem, not dense) if prefill is not None else None
    decode = _fits(decode, wbytes, mem, not dense) if decode is not None else None
    return CorpusRow(
        id=r.id,
        line=line,
        engine=r.backend,
        engine_version=r.backend_version,
        model=r.model_path,
        system=r.system,
        precision=precision,
        kv_dtype=kv,
        mode=r.mode,
        isl=r.isl,
        osl=r.osl,
        concurrency=max(1, conc),
        agg=agg,
        prefill=prefill,
        decode=decode,
        ttft_ms=r.silicon_ttft_ms,
        tpot_ms=r.silicon_tpot_ms,
        workers=workers,
    )


def parse_corpus(text: str, *, source: str = "silicon_dev.csv") -> list[CorpusRow]:
    """Every row of corpus CSV ``text`` (header line 1, rows from line 2)."""
    reader = csv.DictReader(_io.StringIO(text))
    missing = {"id", "backend", "model_path", "system", "mode", "isl", "osl"} - set(reader.fieldnames or ())
    if missing:
        raise ConfigError(f"{source}:1: missing column(s) {', '.join(sorted(missing))}")
    rows = [row_from_record(rec, line=i + 2, source=source) for i, rec in enumerate(reader)]
    return apply_recipes(copy_recorded_deployments(rows), recipes())


def _measurement_key(r: CorpusRow) -> tuple[object, ...]:
    arch = replace(get_model_entry(r.model).arch(), name="", source="")
    return (r.ttft_ms, r.tpot_ms, r.system, r.engine, r.precision, r.isl, r.osl, r.concurrency, arch)


def copy_recorded_deployments(rows: Sequence[CorpusRow]) -> list[CorpusRow]:
    """Rule 5 (a): a disaggregated row whose worker counts were imputed but whose measurement a recorded row
    carries (same TTFT/TPOT, GPU, engine, precision, lengths, concurrency and architecture) takes that row's pools."""
    recorded: dict[tuple[object, ...], CorpusRow] = {}
    for r in rows:
        if r.mode == "disagg" and r.workers == "recorded":
            recorded.setdefault(_measurement_key(r), r)
    out: list[CorpusRow] = []
    for r in rows:
        src = recorded.get(_measurement_key(r)) if r.mode == "disagg" and r.workers == "imputed" else None
        out.append(r if src is None else replace(r, prefill=src.prefill, decode=src.decode, workers="duplicate"))
    return out


def load_corpus(path: str | Path) -> list[CorpusRow]:
    """Read ``silicon_dev.csv`` (or a file with the same columns).

    Raises:
        ConfigError: naming the file, the line and the column.
    """
    p = Path(path)
    return parse_corpus(read_user_text(p, what="corpus CSV"), source=str(p))


def duplicate_groups(rows: Iterable[CorpusRow]) -> dict[tuple[float, float], list[int]]:
    """Indices of rows that carry the same measurement (identical TTFT and TPOT): the export repeats hundreds of
    measurements under other parallel encodings, and ≈ 300 of them under another model name (DeepSeek-R1 vs V3).
    Cross-validation holds a configuration's copies out with it."""
    groups: dict[tuple[float, float], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.ttft_ms, r.tpot_ms), []).append(i)
    return groups


def _fit_pool(p: PoolDeployment) -> Pool:
    return Pool(Parallelism(p.tp, p.attention_dp, p.ep), p.workers)


def observations(rows: Sequence[CorpusRow]) -> list[Observation]:
    """The rows as fit observations; ``group`` numbers the configurations in order of first appearance."""
    groups: dict[tuple[str, str, str, str, str], int] = {}
    out: list[Observation] = []
    for r in rows:
        g = groups.setdefault(r.config_key, len(groups))
        out.append(
            Observation(
                model=get_model_entry(r.model).arch(),
                gpu=resolve_gpu(r.system),
                engine=r.engine,
                weights_dtype=r.precision,
                kv_dtype=r.kv_dtype,
                isl=r.isl,
                osl=r.osl,
                concurrency=r.concurrency,
                ttft_s=r.ttft_ms / 1e3,
                tpot_s=r.tpot_ms / 1e3,
                agg=_fit_pool(r.agg) if r.agg is not None else None,
                prefill=_fit_pool(r.prefill) if r.prefill is not None else None,
                decode=_fit_pool(r.decode) if r.decode is not None else None,
                group=g,
                spec_draft=r.spec_draft,
                launch=r.launch,
            )
        )
    return out
