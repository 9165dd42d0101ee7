"""``tailscope calibrate``: a bounded probe sweep against a real server, then the twin fit.

The probe is three small bench runs (each stored, tagged by its sweep id, so ``--from-runs`` can refit later):

1. **prefill** — one request at a time over a ladder of prompt lengths, 2 output tokens: TTFT vs prompt length;
2. **decode** — closed loop at concurrency 1, 2, 4, 8 (by default) with short and long prompts, 64 output tokens:
   per-token gaps vs batch size and context;

(1 and 2 are repeated in ``rounds`` interleaved rounds, so that the fit averages over the machine's speed drift; each
round ends with ``twin check``'s two anchor runs — a small closed loop and a few lone requests — whose TPOT and TTFTs
are kept as the reference for ``twin check --anchor``)
3. **open** — 144 Poisson arrivals (5/s, prompts of 64, 256 and 768 tokens in turn, 32 output tokens): the probe's only
   open-loop traffic. The twin is fitted without it first; then this phase is simulated request by request on the
   twin and the TTFT it misses on requests that arrived while others were in flight becomes the busy front end
   (``frontend_busy_us``: the API server's work for a request shares the machine with a running engine);
4. **burst** — many long requests at once to reach the KV-cache limit: queueing and preemption, read from the
   server's own counters.

The server's facts come from ``/metrics`` (``vllm:cache_config_info``: block size, KV blocks, prefix caching) and
``/v1/models`` (``max_model_len``), so the twin's KV capacity is the server's (``runner/server_facts.py``). The fit
of the probe's records, and the busy front end, are in ``runner/twin_from_runs.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tailscope.client.openai import Timeouts
from tailscope.engine.twin import ServerFacts
from tailscope.runner.bench import new_run_id, run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.twin_check import ANCHOR, LONE_ANCHOR, lone_anchor_specs, lone_ttfts, merge_ttfts
from tailscope.runner.twin_from_runs import open_loop_specs, with_prompt_scale
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """What the probe sends. Lengths are capped by the server's ``max_model_len``."""

    prompt_ladder: tuple[int, ...] = (16, 64, 192, 384, 768, 1280)
    repeats: int = 4
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    decode_prompts: tuple[int, ...] = (32, 512)
    decode_output: int = 64
    #: the prefill ladder and the decode ladder are run this many times, interleaved: a shared or virtual machine's
    #: speed drifts by ±30 % over seconds (measured here), and a probe taken in one fast or slow stretch fits that
    #: stretch, not the machine (on vLLM CPU, three 4-round calibrations in a row fitted front ends of 9.9, 8.6 and
    #: 6.0 ms and predicted TTFT p50 30–39 ms for the same workload; three 8-round ones, 8.6, 8.6 and 8.4 ms)
    rounds: int = 8
    #: run ``twin check``'s anchor runs once per round and keep their TPOT and TTFTs (the reference for --anchor)
    anchor: bool = True
    #: the open-loop phase that fits the busy front end: (rate /s, requests, prompt lengths in turn, output tokens)
    open_loop: tuple[float, int, tuple[int, ...], int] | None = (5.0, 144, (64, 256, 768), 32)
    burst: bool = True
    burst_requests: int = 24
    burst_prompt: int = 900
    burst_output: int = 32
    time_budget_s: float = 180.0


def _specs(lengths: list[tuple[int, int]], seed: int) -> Iterator[RequestSpec]:
    for i, (p, n) in enumerate(lengths):
        yield RequestSpec(id=i, input_tokens=p, output_tokens=n, seed=seed * 1_000_003 + i)


class _BudgetSpent(Exception):
    """The probe's time budget ran out before a phase could start."""


async def run_probe(
    url: str,
    model: str | None,
    facts: ServerFacts,
    plan: ProbePlan,
    *,
    store: RunStore | None = None,
    seed: int = 0,
    on_phase: Callable[[str], None] | None = None,
) -> tuple[list[BenchResult], dict[str, Any], ServerFacts]:
    """Run the probe phases (each a stored bench run in one sweep), within ``plan.time_budget_s``.

    The budget is kept in two ways: fewer rounds when one more round and the closing phases would not fit, and a
    deadline on every phase — a phase stops starting requests when the budget is spent (its requests in flight get
    a quarter of the budget, at most 120 s, to finish), and the phases after it are not run.

    Returns the runs, what the burst showed (and ``anchor_tpot_ms``: the anchor stream's mean TPOT p50;
    ``anchor_lone_ttft_ms``: the lone anchor requests' median TTFT per prompt length; ``rounds``: done and planned;
    ``budget_note``: a line when fewer rounds were run; ``partial``: when the budget cut the probe, what is missing
    — see :func:`probe_partial`), and the facts with the server's prompt-token scale fitted (how many tokens the
    server counts for a synthesized prompt of N tokens: tokenizers and chat templates differ).
    """
    cap = (facts.max_model_len or 2048) - 64
    budget = plan.time_budget_s
    base = BenchConfig(
        url=url,
        model=model,
        seed=seed,
        timeouts=Timeouts(connect_s=10, first_token_s=120, total_s=300),
        handle_signals=False,
        sweep_id="calibrate-" + new_run_id(),
        probe="calibrate",
    )
    results: list[BenchResult] = []
    requested: list[tuple[int, int]] = []  # (requested prompt tokens, server's prompt tokens)
    probed: set[int] = set()  # prefill ladder lengths with a completed request
    decoded: set[int] = set()  # decode concurrencies with a completed request
    cut: dict[str, str] = {}  # phase → how much of it ran, for phases the deadline stopped
    started = time.monotonic()

    async def phase(
        name: str, lengths: list[tuple[int, int]], concurrency: int | None, specs: list[RequestSpec] | None = None
    ) -> BenchResult:
        left = budget - (time.monotonic() - started)
        if left <= 0:
            raise _BudgetSpent(name)
        if on_phase:
            on_phase(name)
        cfg = replace(
            base,
            dispatch=DispatchConfig(
                concurrency=concurrency, duration_s=left, drain_timeout_s=min(120.0, max(2.0, budget / 4))
            ),
            settings={"probe": name, "concurrency": concurrency, "mode": "closed" if concurrency else "open"},
        )
        specs_in = iter(specs) if specs is not None else _specs(lengths, seed + len(results))
        res = await run_bench(cfg, specs_in, store=store)
        results.append(res)
        done = 0
        for r in res.records:
            if r.ok:
                done += 1
            if r.ok and r.input_tokens and r.id < len(lengths):
                requested.append((lengths[r.id][0], r.input_tokens))
                if name.startswith("prefill"):
                    probed.add(lengths[r.id][0])
        if done and concurrency is not None and name.startswith("decode-c"):
            decoded.add(concurrency)
        if done < len(lengths) and time.monotonic() - started >= budget:
            cut[name] = f"{done} of {len(lengths)} requests"
        return res

    anchors: list[float] = []
    lone: list[dict[int, list[float]]] = []
    ladder = sorted({min(p, cap) for p in plan.prompt_ladder})
    prompts = [min(p, cap - plan.decode_output) for p in plan.decode_prompts]
    round_s: list[float] = []
    rounds_done = 0
    planned = max(1, plan.rounds)
    budget_note = ""
    # the closing phases' time: the open loop's arrivals span n / rate seconds whatever the server's speed
    closing_s = plan.open_loop[1] / plan.open_loop[0] if plan.open_loop is not None else 0.0
    not_run: list[str] = []
    try:
        for k in range(planned):
            if round_s:
                # fewer rounds rather than a failed probe: stop when one more round and the closing phases (about
                # one round's time, or the open loop's span when longer) would not fit in the budget
                elapsed = time.monotonic() - started
                if elapsed + max(round_s) + max(max(round_s), closing_s) > budget:
                    budget_note = (
                        f"{k} of {plan.rounds} rounds fit in {budget:g} s (a round took {max(round_s):.0f} s); "
                        "fewer rounds, a noisier fit — raise --budget for more"
                    )
                    if on_phase:
                        on_phase("budget: " + budget_note)
                    break
            t_round = time.monotonic()
            suffix = f"-r{k + 1}" if plan.rounds > 1 else ""
            names = ["prefill" + suffix, *(f"decode-c{c}{suffix}" for c in plan.concurrencies)]
            if plan.anchor:
                names += ["anchor" + suffix, "anchor-lone" + suffix]
            not_run = names[:]
            await phase("prefill" + suffix, [(p, 2) for p in ladder for _ in range(plan.repeats)], 1)
            not_run.pop(0)
            for c in plan.concurrencies:
                lengths = [(p, plan.decode_output) for p in prompts for _ in range(max(2, c))]
                await phase(f"decode-c{c}{suffix}", lengths, c)
                not_run.pop(0)
            if plan.anchor:
                # the reference run `twin check --anchor` repeats later: its TPOT now vs then is the server's drift
                conc, n, a_prompt, a_out = ANCHOR
                res = await phase("anchor" + suffix, [(a_prompt, a_out)] * n, conc)
                not_run.pop(0)
                tpot = (res.summary.to_dict().get("tpot_ms") or {}).get("p50")
                if tpot:
                    anchors.append(float(tpot))
                specs = lone_anchor_specs(seed, k, cap - LONE_ANCHOR[2])
                res = await phase("anchor-lone" + suffix, [(x.input_tokens, x.output_tokens) for x in specs], 1, specs)
                not_run.pop(0)
                lone.append(lone_ttfts(res.records, specs))
            round_s.append(time.monotonic() - t_round)
            rounds_done = k + 1
        if plan.open_loop is not None:
            not_run = ["open", *(["burst"] if plan.burst else [])]
            rate, n, open_lengths, out = plan.open_loop
            specs = open_loop_specs(rate, n, [min(x, cap - out) for x in open_lengths], out, seed)
            await phase("open", [(x.input_tokens, x.output_tokens) for x in specs], None, specs)
        not_run = ["burst"] if plan.burst else []
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
        not_run = []
    except _BudgetSpent:
        burst = {}
        if plan.open_loop is not None and "open" not in not_run:
            not_run.append("open")
        if plan.burst and "burst" not in not_run:
            not_run.append("burst")
    burst["rounds"] = {"done": rounds_done, "planned": planned}
    if budget_note:
        burst["budget_note"] = budget_note
    if not_run or cut:
        elapsed = time.monotonic() - started
        # a round's time, estimated from the share of round 1's requests that completed when round 1 did not
        sent = sum(1 for res in results[: 3 + len(plan.concurrencies)] for r in res.records if r.ok)
        per_round = plan.repeats * len(ladder) + sum(len(prompts) * max(2, c) for c in plan.concurrencies)
        if plan.anchor:
            per_round += ANCHOR[1] + len(LONE_ANCHOR[0]) * LONE_ANCHOR[1] + 1
        round_est = max(round_s) if round_s else elapsed * per_round / max(1, sent)
        burst["partial"] = {
            "budget_s": budget,
            "elapsed_s": round(elapsed, 1),
            "rounds_done": rounds_done,
            "rounds_planned": planned,
            "phases_not_run": not_run,
            "phases_cut": cut,
            "prompt_lengths_not_probed": [p for p in ladder if p not in probed],
            "concurrencies_not_probed": [c for c in plan.concurrencies if c not in decoded],
            "budget_needed_s": round(max(round_est, 1.0) + max(round_est, closing_s), 0),
        }
    if anchors:
        burst["anchor_tpot_ms"] = sum(anchors) / len(anchors)
        burst["anchor_runs"] = len(anchors)
    lone_ref = merge_ttfts(lone)
    if lone_ref:
        burst["anchor_lone_ttft_ms"] = lone_ref
    return results, burst, with_prompt_scale(facts, requested)
