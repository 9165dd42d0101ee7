"""``tailscope calibrate``: a bounded probe sweep against a real server, then the twin fit.

The probe is three small bench runs (each stored, tagged by its sweep id, so ``--from-runs`` can refit later):

1. **prefill** — one request at a time over a ladder of prompt lengths, 2 output tokens: TTFT vs prompt length;
2. **decode** — closed loop at concurrency 1, 2, 4, 8 (by default) with short and long prompts, 64 output tokens:
   per-token gaps vs batch size and context;

(1 and 2 are repeated in ``rounds`` interleaved rounds, so that the fit averages over the machine's speed drift; each
round ends with ``twin check``'s anchor stream, whose TPOT is kept as the reference for ``twin check --anchor``)
3. **burst** — many long requests at once to reach the KV-cache limit: queueing and preemption, read from the
   server's own counters.

The server's facts come from ``/metrics`` (``vllm:cache_config_info``: block size, KV blocks, prefix caching) and
``/v1/models`` (``max_model_len``), so the twin's KV capacity is the server's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tailscope.client.openai import Timeouts
from tailscope.client.prometheus import parse_prometheus_text
from tailscope.client.rawhttp import RawHttpTransport
from tailscope.engine.twin import ServerFacts, TwinModel, fit_twin
from tailscope.engine.twin_observe import observations
from tailscope.errors import ConfigError, TargetError
from tailscope.records import RequestRecord
from tailscope.runner.bench import BenchConfig, BenchResult, new_run_id, run_bench
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.twin_check import ANCHOR
from tailscope.workload.spec import RequestSpec


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """What the probe sends. Lengths are capped by the server's ``max_model_len``."""

    prompt_ladder: tuple[int, ...] = (16, 64, 192, 384, 768, 1280)
    repeats: int = 2
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    decode_prompts: tuple[int, ...] = (32, 512)
    decode_output: int = 64
    #: the prefill ladder and the decode ladder are run this many times, interleaved: a shared or virtual machine's
    #: speed drifts by ±30 % over seconds (measured here), and a probe taken in one fast or slow stretch fits that
    #: stretch, not the machine
    rounds: int = 4
    #: run ``twin check``'s anchor stream once per round and keep its TPOT in the twin (the reference for --anchor)
    anchor: bool = True
    burst: bool = True
    burst_requests: int = 24
    burst_prompt: int = 900
    burst_output: int = 32
    time_budget_s: float = 180.0


async def server_facts(
    url: str, *, max_num_seqs: int, max_num_batched_tokens: int, block_size: int | None, num_blocks: int | None
) -> ServerFacts:
    """Block size and KV blocks from ``vllm:cache_config_info`` (flags override), ``max_model_len`` from /v1/models.

    Raises:
        TargetError: when the server does not expose its KV capacity and no flags give it.
    """
    t = RawHttpTransport(url)
    try:
        status, _, body = await t.get("/metrics", 10)
        labels: dict[str, str] = {}
        if status == 200:
            for s in parse_prometheus_text(body.decode("utf-8", "replace"), source=url + "/metrics"):
                if s.name == "vllm:cache_config_info":
                    labels = s.label_dict()
                    break
        status, _, body = await t.get("/v1/models", 10)
        model, max_len = "", None
        if status == 200:
            data = json.loads(body).get("data") or [{}]
            model = str(data[0].get("id", ""))
            max_len = data[0].get("max_model_len")
    except (OSError, ValueError, TimeoutError) as exc:
        raise TargetError(f"cannot read the server facts from {url}: {exc}") from None
    finally:
        await t.close()
    bs = block_size or (int(labels["block_size"]) if "block_size" in labels else None)
    nb = num_blocks or (int(labels["num_gpu_blocks"]) if labels.get("num_gpu_blocks", "None") != "None" else None)
    if bs is None or nb is None:
        raise TargetError(
            f"{url}/metrics does not expose vllm:cache_config_info (block size, KV blocks); pass --block-size and "
            "--num-blocks to calibrate against this server"
        )
    return ServerFacts(
        block_size=bs,
        num_blocks=nb,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=int(max_len) if max_len else None,
        enable_prefix_caching=labels.get("enable_prefix_caching", "True") == "True",
        model=model,
        url=url,
    )


def _specs(lengths: list[tuple[int, int]], seed: int) -> Iterator[RequestSpec]:
    for i, (p, n) in enumerate(lengths):
        yield RequestSpec(id=i, input_tokens=p, output_tokens=n, seed=seed * 1_000_003 + i)


async def run_probe(
    url: str,
    model: str | None,
    facts: ServerFacts,
    plan: ProbePlan,
    *,
    db: str | None = None,
    seed: int = 0,
    on_phase: Callable[[str], None] | None = None,
) -> tuple[list[BenchResult], dict[str, Any], ServerFacts]:
    """Run the probe phases (each a stored bench run in one sweep).

    Returns the runs, what the burst showed (and ``anchor_tpot_ms``: the anchor stream's mean TPOT p50), and the
    facts with the server's prompt-token scale fitted (how many tokens the server counts for a synthesized prompt of
    N tokens: tokenizers and chat templates differ).
    """
    cap = (facts.max_model_len or 2048) - 64
    base = BenchConfig(
        url=url,
        model=model,
        db=db,
        seed=seed,
        timeouts=Timeouts(connect_s=10, first_token_s=120, total_s=300),
        handle_signals=False,
        sweep_id="calibrate-" + new_run_id(),
    )
    results: list[BenchResult] = []
    requested: list[tuple[int, int]] = []  # (requested prompt tokens, server's prompt tokens)
    started = time.monotonic()

    async def phase(name: str, lengths: list[tuple[int, int]], concurrency: int) -> BenchResult:
        if on_phase:
            on_phase(name)
        cfg = replace(
            base,
            dispatch=DispatchConfig(concurrency=concurrency, drain_timeout_s=120),
            settings={"probe": name, "concurrency": concurrency, "mode": "closed"},
        )
        res = await run_bench(cfg, _specs(lengths, seed + len(results)))
        results.append(res)
        for r in res.records:
            if r.ok and r.input_tokens and r.id < len(lengths):
                requested.append((lengths[r.id][0], r.input_tokens))
        if time.monotonic() - started > plan.time_budget_s:
            raise ConfigError(f"the calibration probe exceeded its {plan.time_budget_s:g} s budget in phase {name}")
        return res

    anchors: list[float] = []
    ladder = sorted({min(p, cap) for p in plan.prompt_ladder})
    prompts = [min(p, cap - plan.decode_output) for p in plan.decode_prompts]
    for k in range(max(1, plan.rounds)):
        suffix = f"-r{k + 1}" if plan.rounds > 1 else ""
        await phase("prefill" + suffix, [(p, 2) for p in ladder for _ in range(plan.repeats)], 1)
        for c in plan.concurrencies:
            lengths = [(p, plan.decode_output) for p in prompts for _ in range(max(2, c))]
            await phase(f"decode-c{c}{suffix}", lengths, c)
        if plan.anchor:
            # the reference run `twin check --anchor` repeats later: its TPOT now vs then is the server's drift
            conc, n, a_prompt, a_out = ANCHOR
            res = await phase("anchor" + suffix, [(a_prompt, a_out)] * n, conc)
            tpot = (res.summary.to_dict().get("tpot_ms") or {}).get("p50")
            if tpot:
                anchors.append(float(tpot))
    burst: dict[str, Any] = {}
    if plan.burst:
        p = min(plan.burst_prompt, cap - plan.burst_output)
        res = await phase("burst", [(p, plan.burst_output)] * plan.burst_requests, plan.burst_requests)
        server = res.server or {}
        burst = {
            "requests": plan.burst_requests,
            "prompt_tokens": p,
            "kv_tokens_asked": plan.burst_requests * (p + plan.burst_output),
            "kv_capacity_tokens": facts.kv_capacity_tokens,
            "max_queue_depth": (server.get("queue_depth") or {}).get("max"),
            "max_kv_usage": (server.get("kv_usage") or {}).get("max"),
            "preemptions": (server.get("counter_deltas") or {}).get("vllm:num_preemptions_total"),
        }
    if anchors:
        burst["anchor_tpot_ms"] = sum(anchors) / len(anchors)
        burst["anchor_runs"] = len(anchors)
    return results, burst, with_prompt_scale(facts, requested)


def with_prompt_scale(facts: ServerFacts, pairs: list[tuple[int, int]]) -> ServerFacts:
    """``facts`` with ``server tokens ≈ offset + scale × requested`` fitted by least squares (unchanged under 3
    pairs or without spread in the requested lengths)."""
    if len(pairs) < 3 or len({x for x, _ in pairs}) < 2:
        return facts
    x = np.array([p[0] for p in pairs], dtype=np.float64)
    y = np.array([p[1] for p in pairs], dtype=np.float64)
    scale, offset = np.polyfit(x, y, 1)
    return replace(facts, prompt_scale=max(float(scale), 1e-3), prompt_offset=max(float(offset), 0.0))


def fit_from_runs(runs: list[list[RequestRecord]], facts: ServerFacts, *, seed: int = 0) -> TwinModel:
    """Fit a twin from the records of several runs (probe runs, or ordinary bench runs).

    Observations are taken per run: record times are relative to each run's own start, so concurrency can only be
    measured within one run.
    """
    pre: list[Any] = []
    dec: list[Any] = []
    loaded: list[Any] = []
    for records in runs:
        p, d, lt = observations(records)
        pre += p
        dec += d
        loaded += lt
    return fit_twin(pre, dec, facts, loaded_ttft=loaded, seed=seed)
