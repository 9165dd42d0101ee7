"""``diagnose``: run every rule over a run (records + server samples + optional trace analysis), order by impact.

The rules live in :mod:`tailscope.verify.rules_engine`, :mod:`tailscope.verify.rules_client` and
:mod:`tailscope.verify.rules_trace`. :data:`CHECKLISTS` holds the diagnosis steps per symptom; the alert rules carry
them as runbook annotations, so the page an on-call engineer gets says what ``tailscope diagnose`` would check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.record_ops import find_record
from tailscope.records import RequestRecord, ServerSample
from tailscope.verify import rules_client, rules_engine, rules_trace
from tailscope.verify.findings import Finding, RunView, build_view
from tailscope.verify.tree_model import Tree

Rule = Callable[[RunView], Finding | None]

#: Every rule, by id. Order breaks impact ties.
RULES: dict[str, Rule] = {
    "client_bottleneck": rules_client.client_bottleneck,
    "errors": rules_client.errors,
    "saturation": rules_engine.saturation,
    "kv_pressure": rules_engine.kv_pressure,
    "prefill_bound": rules_engine.prefill_bound,
    "prefix_cache_low": rules_engine.prefix_cache_low,
    "prefill_interference": rules_engine.prefill_interference,
    "stalls": rules_engine.stalls,
    "long_output_tail": rules_engine.long_output_tail,
    "cold_start": rules_client.cold_start,
    "layers_dominate": rules_trace.layers_dominate,
    "waterfalls": rules_trace.waterfalls,
    "retries": rules_trace.retries,
}

#: Diagnosis checklists per symptom (what to look at, in order) — the runbooks of the generated alerts.
CHECKLISTS: dict[str, tuple[str, ...]] = {
    "ttft": (
        "Is the server queueing? vllm:num_requests_waiting > 0 → saturation: shed load or add replicas.",
        "Is the KV cache full? vllm:kv_cache_usage_perc > 0.9 or preemptions rising → KV pressure: cap max_num_seqs.",
        "Did prompts get longer? TTFT tracking prompt length at low load → prefill-bound: cache or trim prompts.",
        "Is the prefix-cache hit rate low for shared prompts? → move dynamic content after the shared prefix.",
        "Just restarted? First requests slow → cold start: pre-warm replicas.",
        "Run `tailscope bench` against the replica and `tailscope diagnose latest` for the numbers.",
    ),
    "e2e": (
        "Is TTFT also high? Follow the TTFT checklist first.",
        "Is TPOT/ITL high? KV pressure or long prompts interfering with decodes (chunked prefill).",
        "Are outputs longer than usual? E2E tail driven by output length → judge by TPOT, cap max_tokens.",
        "Streams pausing? Check preemptions and proxies buffering SSE.",
        "Run `tailscope diagnose latest` on a fresh bench run.",
    ),
    "tpot": (
        "Preemptions or KV usage > 0.9? → KV pressure: lower concurrency, FP8 KV, more memory for KV.",
        "Do long prompts arrive? ITL spikes during prefills → enable chunked prefill, split long-context traffic.",
        "Concurrency up? TPOT grows with the running batch; compare vllm:num_requests_running with the baseline.",
        "Stalls: long pauses mid-stream → check preemptions, GC pauses, proxy buffering.",
    ),
    "errors": (
        "Which status? 429 → rate limiting (quota, gateway); 5xx → server failures; timeouts → saturation.",
        "Burst or steady? A burst points at a restart, deploy or dependency outage; read the server log then.",
        "OOM kills or restarts of the engine? Check container status and memory.",
        "Is the queue growing (vllm:num_requests_waiting)? Requests may time out waiting.",
    ),
    "queue": (
        "Offered load above capacity: compare the request rate with the capacity from `tailscope plan`.",
        "Is KV usage the limit (vllm:kv_cache_usage_perc near 1)? Then more concurrency will not help.",
        "Scale out or shed load; autoscale on this signal.",
    ),
    "kv": (
        "KV cache near full: expect preemptions and TPOT growth.",
        "Cap concurrency (max_num_seqs) to what the cache holds for current prompt + output lengths.",
        "Free memory for KV: gpu_memory_utilization, FP8 KV cache, shorter max_model_len; add replicas.",
    ),
    "preemption": (
        "Preempted requests are recomputed: TPOT and E2E tails grow, streams stall.",
        "Follow the KV checklist: cap concurrency or add KV memory.",
    ),
    "throughput": (
        "Fewer requests finishing: are requests failing (error ratio) or queueing (num_requests_waiting)?",
        "Did traffic drop (upstream) or capacity drop (replicas down)?",
    ),
}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The findings of one run, highest impact first.

    Attributes:
        run_id: the run diagnosed.
        findings: what the rules found (empty: no rule triggered).
        rules: the ids of the rules that ran.
        trees: the method's troubleshooting trees walked on the run (:mod:`tailscope.verify.trees`): per symptom,
            whether the run shows it and each branch's verdict with its evidence (empty when not walked).
    """

    run_id: str
    findings: tuple[Finding, ...]
    rules: tuple[str, ...] = tuple(RULES)
    trees: tuple[Tree, ...] = ()

    @property
    def symptoms(self) -> tuple[Tree, ...]:
        """The trees whose symptom the run shows."""
        return tuple(t for t in self.trees if t.present)

    def tree(self, symptom: str) -> Tree:
        """One walked tree by symptom id (``ttft_high``, ``stutter``, …). Raises KeyError when not walked."""
        return find_record(self.trees, lambda t: t.symptom, symptom)

    def to_dict(self) -> dict[str, Any]:
        """The document ``tailscope diagnose --json`` prints: ``{"run", "findings", "trees"}``."""
        return {
            "run": self.run_id,
            "findings": [f.to_dict() for f in self.findings],
            "trees": [t.to_dict() for t in self.trees],
        }


def diagnose(
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample] = (),
    *,
    trace: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    rules: Mapping[str, Rule] | None = None,
) -> list[Finding]:
    """All findings for a run, highest impact first.

    Args:
        records: the run's request records (warmup ones are excluded, and counted for the cold-start rule).
        samples: scraped server metrics (vLLM, SGLang or TGI names).
        trace: a trace analysis dict (``tailscope trace analyze --json``) for the layer, waterfall and retry rules.
        settings: the run's settings (``rate`` is used to detect a client that fell behind).
        rules: the rules to run (default :data:`RULES`).
    """
    view = build_view(records, samples, trace=trace, settings=settings)
    chosen = RULES if rules is None else rules
    order = {name: i for i, name in enumerate(chosen)}
    found = [f for f in (rule(view) for rule in chosen.values()) if f is not None]
    return explained_after_cause(sorted(found, key=lambda f: (-f.impact, order.get(f.rule, 0))))


def explained_after_cause(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` (highest impact first) with each one a found rule explains moved right after that rule's finding.

    A symptom can score a higher impact than its cause (the demo's stalls cover more streams than the prefill
    interference that makes them); the reader should meet the cause first.
    """
    found = {f.rule for f in findings}
    symptoms: dict[str, list[Finding]] = {}
    for f in findings:
        if f.explained_by in found and f.explained_by != f.rule:
            symptoms.setdefault(f.explained_by, []).append(f)
    moved = {id(f) for group in symptoms.values() for f in group}
    out: list[Finding] = []
    for f in findings:
        if id(f) not in moved:
            out.append(f)
            out.extend(symptoms.get(f.rule, ()))
    return out
