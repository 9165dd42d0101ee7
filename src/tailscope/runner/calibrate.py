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
``/v1/models`` (``max_model_len``), so the twin's KV capacity is the server's.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tailscope.client.openai import Timeouts
from tailscope.client.prometheus import PromSample, parse_prometheus_text
from tailscope.client.rawhttp import RawHttpTransport
from tailscope.engine.twin import ServerFacts, TwinModel, busy_frontend_excess, fit_twin
from tailscope.engine.twin_observe import observations
from tailscope.errors import ConfigError, TargetError
from tailscope.metrics import request as rq
from tailscope.records import RequestRecord, ServerSample
from tailscope.runner.bench import new_run_id, run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.twin_check import ANCHOR, LONE_ANCHOR, lone_anchor_specs, lone_ttfts, merge_ttfts
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
    facts = facts_from_labels(
        labels,
        url=url,
        model=model,
        max_model_len=int(max_len) if max_len else None,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        num_blocks=num_blocks,
    )
    if facts is None:
        raise TargetError(
            f"{url}/metrics does not expose vllm:cache_config_info (block size, KV blocks); pass --block-size and "
            "--num-blocks to calibrate against this server"
        )
    return facts


def facts_from_labels(
    labels: Mapping[str, str],
    *,
    url: str,
    model: str,
    max_model_len: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int | None,
    num_blocks: int | None,
) -> ServerFacts | None:
    """Server facts from the labels of ``vllm:cache_config_info`` (flags override); None when the KV geometry is
    in neither."""
    bs = block_size or (int(labels["block_size"]) if labels.get("block_size", "").isdigit() else None)
    nb = num_blocks or (int(labels["num_gpu_blocks"]) if labels.get("num_gpu_blocks", "").isdigit() else None)
    if bs is None or nb is None:
        return None
    return ServerFacts(
        block_size=bs,
        num_blocks=nb,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_prefix_caching=labels.get("enable_prefix_caching", "True") == "True",
        model=model,
        url=url,
    )


def stored_cache_labels(samples: Sequence[ServerSample]) -> dict[str, str]:
    """The labels of the last ``vllm:cache_config_info`` a run scraped ({} when it scraped none)."""
    for s in reversed(samples):
        if s.name == "vllm:cache_config_info":
            return PromSample(s.name, s.labels, s.value).label_dict()
    return {}


def fit_inputs(runs: Sequence[Sequence[RequestRecord]]) -> tuple[set[int], int, set[int]]:
    """What the fit can use in these runs: the prompt lengths of lone requests (nothing else in flight), the number
    of decode observations (requests of ≥ 8 output tokens) and the batch sizes they were seen at."""
    lone: set[int] = set()
    decode = 0
    batch: set[int] = set()
    for records in runs:
        pre, dec, _loaded = observations(records)
        lone.update(o.prompt_tokens for o in pre)
        decode += len(dec)
        batch.update(round(o.concurrency) for o in dec)
    return lone, decode, batch


def check_fit_inputs(runs: Sequence[tuple[str, Sequence[RequestRecord]]]) -> str | None:
    """Refuse stored runs that cannot be fitted, with the reason: prefill needs lone requests (nothing else in flight)
    at two or more prompt lengths, decode needs requests of ≥ 8 output tokens.

    Returns:
        A caveat when the fit is possible but underdetermined (decode seen at one concurrency only), else None.

    Raises:
        ConfigError: naming the runs and what to add.
    """
    names = ", ".join(run_id for run_id, _ in runs)
    lone, decode, batch = fit_inputs([records for _, records in runs])
    if len(lone) < 2:
        seen = f"only at {next(iter(lone))} tokens" if lone else "none"
        raise ConfigError(
            f"--from-runs {names}: prefill time cannot be fitted — it needs requests sent alone (nothing else in "
            f"flight) at two or more prompt lengths, and these runs have {seen}; add a run such as `tailscope bench "
            "--concurrency 1 --requests 40 --input-tokens uniform:100:2000 --output-tokens 32` against the same server"
        )
    if decode < 3:
        raise ConfigError(
            f"--from-runs {names}: decode time cannot be fitted — fewer than 3 requests produced ≥ 8 output tokens; "
            "add a run with --output-tokens 32 or more"
        )
    if len(batch) < 2:
        return (
            "decode was seen at one batch size only, so the per-step and per-sequence costs are not told apart "
            "(add a run at --concurrency 4 or 8 for a twin that extrapolates to load)"
        )
    return None


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


def open_loop_specs(rate: float, n: int, lengths: list[int], output: int, seed: int) -> list[RequestSpec]:
    """Poisson arrivals at ``rate``/s, prompt lengths in turn, new text per request."""
    rng = random.Random(seed * 7_919 + 17)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(rate)
        out.append(
            RequestSpec(
                id=i,
                input_tokens=lengths[i % len(lengths)],
                output_tokens=output,
                at_ns=int(t * 1e9),
                seed=0x0BE4_0000 + seed * 100_003 + i,
            )
        )
    return out


def fit_busy_frontend(twin: TwinModel, records: list[RequestRecord], *, rounds: int = 3) -> TwinModel:
    """The twin with ``frontend_busy_us`` fitted on an open-loop run: the run is simulated on the twin (same arrival
    times, the server's prompt lengths, the requested output lengths) and the difference between the median TTFT of
    requests that arrived while others were in flight, measured vs simulated, is added to their front end; in
    ``rounds`` steps, since the added time itself moves queueing. Unchanged (busy front end 0) under 5 such requests.
    """
    import tempfile
    from pathlib import Path

    import yaml

    from tailscope.sim.run import SimArgs, build_cluster
    from tailscope.sim.simulator import Simulation

    ok = sorted(
        (r for r in records if r.ok and r.input_tokens and r.first_token_ns is not None and not r.warmup),
        key=lambda r: r.scheduled_ns,
    )
    # the twin's TTFT for each prompt on an idle server, subtracted on both sides: it takes the prompt mix's spread
    # out of the comparison (the medians' standard error drops ≈ 3×)
    alone_us = twin.coefficients.lone_ttft_us
    measured = _busy_ttfts(ok, alone_us)
    specs = [
        RequestSpec(
            id=i,
            input_tokens=r.input_tokens or 1,
            output_tokens=max(1, r.requested_output_tokens or r.output_tokens or 1),
            at_ns=r.scheduled_ns - ok[0].scheduled_ns,
            seed=i,
        )
        for i, r in enumerate(ok)
    ]
    busy_us, stderr_us, n = 0.0, 0.0, 0
    fitted = twin
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "twin.yaml"
        for _ in range(rounds):
            path.write_text(yaml.safe_dump(fitted.to_mapping(), sort_keys=False), encoding="utf-8")
            sim = {r.id: r for r in Simulation(build_cluster(SimArgs(calibration=path)), iter(specs)).run()}
            if len(sim) != len(specs) or any(not r.ok or r.first_token_ns is None for r in sim.values()):
                return twin  # the twin cannot serve the run as measured (e.g. a prompt beyond its limits)
            simulated = _busy_ttfts([sim[i] for i in range(len(specs))], alone_us)
            extra, stderr_us, n = busy_frontend_excess(measured, simulated)
            if n == 0:
                return twin
            busy_us = max(0.0, busy_us + extra)
            fitted = replace(
                twin,
                coefficients=replace(twin.coefficients, frontend_busy_us=busy_us),
                stderr=replace(twin.stderr, frontend_busy_us=stderr_us),
            )
    return replace(fitted, fitted_on={**fitted.fitted_on, "busy_arrivals": n})


def open_loop_send_lags(records: list[RequestRecord]) -> list[float]:
    """The send lags (ms) of an open-loop run's completed requests: how late the client sent each one."""
    return [v for r in records if r.ok and not r.warmup and (v := rq.send_lag_ms(r)) is not None and v >= 0]


def _busy_ttfts(records: list[RequestRecord], alone_us: Callable[[int], float]) -> list[tuple[bool, float]]:
    """(another request was in flight at this one's intended send time, TTFT µs − ``alone_us(prompt)``) per
    record."""
    spans = [(r.scheduled_ns, r.end_ns or r.scheduled_ns) for r in records]
    return [
        (
            any(s <= r.scheduled_ns < e for j, (s, e) in enumerate(spans) if j != i),
            ((r.first_token_ns or 0) - r.scheduled_ns) / 1e3 - alone_us(r.input_tokens or 0),
        )
        for i, r in enumerate(records)
    ]


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
