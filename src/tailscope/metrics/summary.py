"""Run summaries: the numbers users see, computed from raw records (never stored as the only copy)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.chunk_times import ChunkTimes
from tailscope.metrics.first_wave import FirstWave, first_wave
from tailscope.metrics.perceived import Perceived, PerceivedThresholds, perceived
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.metrics.reasoning import PromptCache, Reasoning, prompt_cache_of, reasoning_of
from tailscope.metrics.run_warnings import LOOP_LAG_WARN_MS as LOOP_LAG_WARN_MS  # runner/workers/report.py reads
from tailscope.metrics.run_warnings import SEND_LAG_WARN_MS as SEND_LAG_WARN_MS  # these two thresholds here
from tailscope.metrics.run_warnings import run_warnings, server_messages
from tailscope.metrics.samples import run_samples
from tailscope.metrics.slo import Slo, SloResult, check_slo, error_adjusted_p99, meets_slos
from tailscope.metrics.steady import SteadyWindow, steady_window
from tailscope.records import RequestCounts, RequestRecord, Status


@dataclass(frozen=True, slots=True)
class GroupLatency:
    """TTFT and E2E of one group of successful requests (a session turn number, shared or unshared prefix).

    Attributes:
        count: successful non-warmup requests in the group.
        ttft_ms, e2e_ms: their percentiles (ms, from the intended send time).
    """

    count: int
    ttft_ms: Stats
    e2e_ms: Stats

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms.to_dict(), "e2e_ms": self.e2e_ms.to_dict(), "count": self.count}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Everything a user reads about a run. Latencies in ms, rates per second over the measurement window."""

    requests: RequestCounts
    duration_s: float
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    send_lag_ms: Stats
    icl_ms: Stats
    max_stall_ms: Stats
    ttft_from_sent_ms: Stats
    e2e_from_sent_ms: Stats
    input_tokens: Stats
    output_tokens: Stats
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    goodput_rps: float
    error_adjusted_ms: dict[str, float | None]
    errors: dict[str, int]
    slo: tuple[SloResult, ...] = ()
    warnings: tuple[str, ...] = ()
    classes: dict[str, RunSummary] = field(default_factory=dict)
    achieved_rate_rps: float | None = None
    requested_rate_rps: float | None = None
    turns: dict[int, GroupLatency] = field(default_factory=dict)
    shared_prefix: dict[str, GroupLatency] = field(default_factory=dict)
    loop_lag_ms: Stats | None = None  # the client's event-loop lag (bench runs; None for simulations and imports)
    perceived: Perceived | None = None  # what a reader notices: slow streams, stalls, slow first tokens
    steady: SteadyWindow | None = None  # the run without its ramp-up and drain (None: too few requests)
    reasoning: Reasoning | None = None  # reasoning models: time to the first answer token, reasoning vs answer
    prompt_cache: PromptCache | None = None  # prompt tokens the server served from cache (usage cached_tokens)
    first_wave: FirstWave | None = None  # the opening burst against the rest (None: no distinct first wave)

    def metric(self, name: str) -> Stats:
        """Stats by metric name (``ttft_ms``, ``tpot``, ``itl_ms``, …)."""
        key = name if name.endswith("_ms") else f"{name}_ms"
        value = getattr(self, key, None)
        if not isinstance(value, Stats):
            raise KeyError(name)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``summary`` object (key names are a stable interface)."""
        return {
            "requests": self.requests.to_dict(),
            "duration_s": self.duration_s,
            "ttft_ms": self.ttft_ms.to_dict(),
            "tpot_ms": self.tpot_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(),
            "e2e_ms": self.e2e_ms.to_dict(),
            "send_lag_ms": self.send_lag_ms.to_dict(),
            "icl_ms": self.icl_ms.to_dict(),
            "max_stall_ms": self.max_stall_ms.to_dict(),
            "ttft_from_sent_ms": self.ttft_from_sent_ms.to_dict(),
            "e2e_from_sent_ms": self.e2e_from_sent_ms.to_dict(),
            "input_tokens": self.input_tokens.to_dict(),
            "output_tokens": self.output_tokens.to_dict(),
            "output_tokens_per_s": self.output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "goodput_rps": self.goodput_rps,
            "error_adjusted_ms": dict(self.error_adjusted_ms),
            "errors": dict(self.errors),
            "slo": [s.to_dict() for s in self.slo],
            "warnings": list(self.warnings),
            "achieved_rate_rps": self.achieved_rate_rps,
            "requested_rate_rps": self.requested_rate_rps,
            "classes": {k: v.to_dict() for k, v in self.classes.items()},
            "turns": {str(k): v.to_dict() for k, v in sorted(self.turns.items())},
            "shared_prefix": {k: v.to_dict() for k, v in self.shared_prefix.items()},
            **({"loop_lag_ms": self.loop_lag_ms.to_dict()} if self.loop_lag_ms is not None else {}),
            **({"perceived": self.perceived.to_dict()} if self.perceived is not None else {}),
            "steady": None if self.steady is None else self.steady.to_dict(),
            **({"reasoning": self.reasoning.to_dict()} if self.reasoning is not None else {}),
            **({"prompt_cache": self.prompt_cache.to_dict()} if self.prompt_cache is not None else {}),
            **({"first_wave": self.first_wave.to_dict()} if self.first_wave is not None else {}),
        }


def summarize(
    records: Iterable[RequestRecord],
    *,
    slos: Sequence[Slo] = (),
    requested_rate_rps: float | None = None,
    loop_lag_ms: Stats | None = None,
    by_class: bool = True,
    perceived_thresholds: PerceivedThresholds | None = None,
    max_in_flight: int | None = None,
    chunk_times: ChunkTimes | None = None,
) -> RunSummary:
    """Summarize a run's records.

    Warmup records are excluded from every statistic and counted in ``requests.warmup``. Latency percentiles cover
    successful requests; ``error_adjusted_ms`` gives TTFT and E2E p99 with failures counted as +∞. Rates are over the
    measurement window: first scheduled non-warmup request → last completion.

    Args:
        records: the run's request records (any order).
        slos: objectives for the per-run verdicts and the goodput test.
        requested_rate_rps: the open-loop rate asked for, to detect a client that fell behind.
        loop_lag_ms: the client's event-loop lag samples, to detect a saturated client.
        by_class: also summarize each request class separately.
        max_in_flight: a capped open loop's cap: late sends are then waits for a slot (said so), not a slow client.
        chunk_times: the records' chunk times already flattened, in ``records``' order
            (:func:`~tailscope.metrics.chunk_times.flatten`: a simulation hands them over, so they are flattened
            once for the summary, the store and the export).
    """
    all_records = list(records)
    measured = [r for r in all_records if not r.warmup]
    if chunk_times is not None and len(measured) != len(all_records):
        chunk_times = chunk_times.select(np.fromiter((not r.warmup for r in all_records), bool, len(all_records)))
    warmup = len(all_records) - len(measured)
    ok = [r for r in measured if r.status is Status.OK]
    failed = [r for r in measured if r.status is Status.ERROR]
    incomplete = [r for r in measured if r.status is Status.INCOMPLETE]
    counts = RequestCounts(
        total=len(measured), completed=len(ok), failed=len(failed), incomplete=len(incomplete), warmup=warmup
    )

    window_s = _window_s(measured)
    out_counts = [rq.output_token_count(r) for r in ok]
    out_tokens = sum(out_counts)
    in_tokens = sum(r.input_tokens or 0 for r in ok)
    good = sum(1 for r in ok if meets_slos(r, slos)) if slos else len(ok)  # without SLOs every success is good
    s = run_samples(measured, chunk_times)

    errors = Counter((r.error.value if r.error else "unknown") for r in failed)
    slo_results = tuple(check_slo(slo, s, len(failed)) for slo in slos)

    achieved = _achieved_rate(measured)
    lag_stats = compute_stats(s["lag"])
    wave = first_wave(measured) if by_class else None
    warnings = run_warnings(
        counts, errors, lag_stats, loop_lag_ms, requested_rate_rps, achieved, ok, wave, cap=max_in_flight
    )
    if failed:
        warnings = (*warnings, *server_messages(failed))
    steady = steady_window(measured) if by_class else None
    if steady is not None and steady.stationary is False and steady.ttft_drift is not None:
        warnings = (
            *warnings,
            f"NON-STATIONARY: TTFT drifted {steady.ttft_drift:+.0%} across the steady window "
            f"({steady.start_s:.1f}–{steady.end_s:.1f} s): the load never settled, so the percentiles mix regimes. "
            "Run longer, or read them by time window.",
        )

    classes: dict[str, RunSummary] = {}
    if by_class:
        names = sorted({r.request_class for r in all_records})
        if len(names) > 1:
            for name in names:
                classes[name] = summarize(
                    [r for r in all_records if r.request_class == name], slos=slos, by_class=False
                )

    def rate(x: float) -> float:
        return x / window_s if window_s > 0 else 0.0

    itl_stats = compute_stats(s["itl"])

    return RunSummary(
        requests=counts,
        duration_s=window_s,
        ttft_ms=compute_stats(s["ttft"]),
        tpot_ms=compute_stats(s["tpot"]),
        itl_ms=itl_stats,
        e2e_ms=compute_stats(s["e2e"]),
        send_lag_ms=lag_stats,
        icl_ms=itl_stats if s["icl"] is s["itl"] else compute_stats(s["icl"]),
        max_stall_ms=compute_stats(s["stall"]),
        ttft_from_sent_ms=compute_stats(s["ttft_sent"]),
        e2e_from_sent_ms=compute_stats(s["e2e_sent"]),
        input_tokens=compute_stats([float(r.input_tokens) for r in ok if r.input_tokens is not None]),
        output_tokens=compute_stats([float(n) for n in out_counts]),
        output_tokens_per_s=rate(out_tokens),
        total_tokens_per_s=rate(out_tokens + in_tokens),
        requests_per_s=rate(len(ok)),
        goodput_rps=rate(good),
        error_adjusted_ms={
            "ttft_p99": error_adjusted_p99(s["ttft"], len(failed)),
            "e2e_p99": error_adjusted_p99(s["e2e"], len(failed)),
        },
        errors=dict(sorted(errors.items())),
        slo=slo_results,
        warnings=warnings,
        classes=classes,
        achieved_rate_rps=achieved,
        requested_rate_rps=requested_rate_rps,
        turns=_by_turn(ok),
        shared_prefix=_by_prefix(ok),
        loop_lag_ms=loop_lag_ms,
        perceived=perceived(
            measured,
            perceived_thresholds,
            tpot_ms=s["tpot"],
            ttft_ms=s["ttft"],
            flat_gaps=s["_flat"][0] if s["_flat"] else None,
        ),
        steady=steady,
        reasoning=reasoning_of(ok),
        prompt_cache=prompt_cache_of(ok),
        first_wave=wave,
    )


def _group(records: Sequence[RequestRecord]) -> GroupLatency:
    ttft = [v for r in records if (v := rq.ttft_ms(r)) is not None]
    e2e = [v for r in records if (v := rq.e2e_ms(r)) is not None]
    return GroupLatency(count=len(records), ttft_ms=compute_stats(ttft), e2e_ms=compute_stats(e2e))


def _by_turn(ok: Sequence[RequestRecord]) -> dict[int, GroupLatency]:
    """TTFT/E2E by session turn number (0-based), over successful session requests; empty without sessions."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.session_id is not None and r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    return {t: _group(turns[t]) for t in sorted(turns)}


def _by_prefix(ok: Sequence[RequestRecord]) -> dict[str, GroupLatency]:
    """TTFT/E2E of requests that start with a shared prefix vs those that do not; empty when none does."""
    shared = [r for r in ok if r.shared_prefix]
    if not shared:
        return {}
    return {"shared": _group(shared), "unshared": _group([r for r in ok if not r.shared_prefix])}


def _window_s(measured: Sequence[RequestRecord]) -> float:
    if not measured:
        return 0.0
    start = min(r.scheduled_ns for r in measured)
    ends = [r.end_ns for r in measured if r.end_ns is not None]
    if not ends:
        return 0.0
    return max(0.0, (max(ends) - start) / 1e9)


def _achieved_rate(measured: Sequence[RequestRecord]) -> float | None:
    """Requests actually sent per second between the first and the last send (``None`` under 2 sends)."""
    sent = sorted(r.sent_ns for r in measured if r.sent_ns is not None)
    if len(sent) < 2 or sent[-1] == sent[0]:
        return None
    return (len(sent) - 1) / ((sent[-1] - sent[0]) / 1e9)
