"""Rule 10 of the calibration corpus (:mod:`tailscope.io.corpus`): what InferenceX's public configurations and
launch scripts say of the rows of its runs.

The disaggregated rows of the two InferenceX exports (``source_file=2026-03-25.csv`` / ``2026-04-06.csv``) come
from configurations InferenceX publishes (``.github/configs/nvidia-master.yaml`` of SemiAnalysisAI/InferenceX,
as it stood when each row was measured): per model, precision, GPU, framework and lengths, the concurrencies
each deployment ran, with its prefill and decode workers and whether it decoded speculatively (MTP).
``inferencex_recipes.csv`` (beside this module; ``scripts/inferencex_recipes.py`` regenerates it) holds the
deployment of each row that exactly one recipe lists, and its speculative decoding: ``none``, ``mtp``, or
``unknown`` (both kinds list the concurrency and the export does not hold the pair; where it does, the two runs
are two rows with the same columns and the faster decode is the MTP one). A row whose worker counts rule 5 (b)
would impute takes the recipe's workers and parallelism instead when its pools have the recipe's GPUs per
worker (``workers = "recipe"``); every listed row carries its ``spec``. The same exports' aggregated rows that
name their container image are listed too, by the single-node entries with that image: InferenceX runs an MTP
recipe as an entry of its own (``…-mtp``), usually with an image of its own, so the image (and, where plain and
MTP entries share it, the search-space item with the row's lengths, concurrency and parallelism) says whether the
run decoded speculatively, and the entry's launch script says its draft length. An aggregated row keeps its own
deployment and takes only ``spec`` and ``spec_draft``. The aggregated rows of InferenceX's runs (those exports
and its database dump, ``db-dump/``) also take the scheduler settings their launch script gave the server
(``benchmarks/[single_node/]<model>_<precision>_<gpu>[_trt][_mtp][_slurm].sh`` at the last commit before the
row was measured, the one whose server command is the row's engine, its branches evaluated for the row's
lengths, TP and concurrency): TensorRT-LLM's batch waiting and token budget (Llama-3.1-70B's scripts set
``batch_wait_timeout_iters: 20`` and ``batch_wait_max_tokens_ratio: 0.9`` with ``--max_num_tokens 16384`` for
1k/1k below TP 8, DeepSeek-R1 FP8 on B200's 40 and 0.8 for 1k/1k from 64 clients: 56 rows) and the running
requests it allows (SGLang's ``--max-running-requests``, vLLM's ``--max-num-seqs``: 744 rows carry a cap, which
bounds the clients a rank admits), and TensorRT-LLM's attention-DP balancing where the script enables it
(``attention_dp_config`` with ``enable_balance: true`` and ``timeout_iters: 60`` in the DeepSeek-R1 scripts for B200
and H200 under attention DP: 67 rows). The other rows with attention DP keep the engine's learned wait: those no
script covers (the multi-node GB200 runs), and the 12 gpt-oss rows whose scripts do not enable it, which wait as
much as the learned wait says all the same (priced without any: their cross-validated TTFT 19.8 → 39.1 %, median
+5 → −40 %), so the balancing is not what it stands for on them. The table also records SGLang's
``--scheduler-recv-interval`` (the B200 scripts of DeepSeek-R1 and Qwen3.5: 10, or 30 from 16 clients; 296 rows),
which the corpus does not give its rows: charged to them, it made the cross-validated TTFT worse (docs/engine.md,
*SGLang's receive interval*). No measurement comes from there.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tailscope.engine.launch import NOT_SET, LaunchSettings
from tailscope.io.corpus_row import CorpusRow, PoolDeployment

#: the table (see the module docstring)
RECIPES = Path(__file__).with_name("inferencex_recipes.csv")


@dataclass(frozen=True, slots=True)
class Recipe:
    """One corpus row's deployment as its public recipe states it (rule 10)."""

    spec: str
    prefill: PoolDeployment | None  # None for an aggregated row (its own deployment stands)
    decode: PoolDeployment | None
    draft: int = 0
    launch: LaunchSettings = NOT_SET


def recipe_pool(workers: str, tp: str, ep: str, dp_attn: str) -> PoolDeployment:
    """A recipe's pool: ``tp`` GPUs per worker (or ``ep`` where larger), attention data parallelism over all of them
    with ``dp-attn``, else tensor parallelism."""
    t, e = int(tp), max(1, int(ep))
    g = max(t, e)
    if int(dp_attn):
        return PoolDeployment(g, 1, g, e, int(workers))
    return PoolDeployment(g, g, 1, e, int(workers))


def recipes(path: Path = RECIPES) -> dict[str, Recipe]:
    """Rule 10's table: corpus row id → the recipe's deployment and speculative decoding."""
    out: dict[str, Recipe] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            prefill, decode = (
                recipe_pool(rec[f"{p}_workers"], rec[f"{p}_tp"], rec[f"{p}_ep"], rec[f"{p}_dp_attn"])
                if rec["prefill_workers"]  # empty for an aggregated row
                else None
                for p in ("prefill", "decode")
            )
            out[rec["id"]] = Recipe(
                rec["spec"],
                prefill,
                decode,
                int(rec["draft"] or 0),
                LaunchSettings.parse(rec),
            )
    return out


def apply_recipes(rows: Sequence[CorpusRow], table: dict[str, Recipe]) -> list[CorpusRow]:
    """Rule 10: each listed row's ``spec``, and an imputed disaggregated row's pools from its recipe when their GPUs
    per worker agree (a recipe that disagrees describes the pool in another encoding than the row; the row keeps rule
    5). An aggregated row keeps its deployment."""
    out: list[CorpusRow] = []
    for r in rows:
        rec = table.get(r.id)
        if rec is None:
            out.append(r)
            continue
        r = replace(
            r,
            spec=rec.spec,
            spec_draft=rec.draft if rec.spec == "mtp" else 0,
            launch=rec.launch,
        )
        if rec.prefill is None or rec.decode is None:
            out.append(r)  # an aggregated row: only its decoding
            continue
        gpus = (r.prefill.gpus, r.decode.gpus) if r.prefill is not None and r.decode is not None else None
        if r.workers == "imputed" and gpus == (rec.prefill.gpus, rec.decode.gpus):
            r = replace(r, prefill=rec.prefill, decode=rec.decode, workers="recipe")
        out.append(r)
    return out
