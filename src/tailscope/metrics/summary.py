"""Run summaries: the numbers users see, computed from raw records (never stored as the only copy)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.perceived import Perceived, PerceivedThresholds, perceived
from tailscope.metrics.percentiles import Stats, compute_stats, percentile_fraction, quantile
from tailscope.metrics.reasoning import PromptCache, Reasoning, prompt_cache_of, reasoning_of
from tailscope.metrics.slo import Slo
from tailscope.metrics.steady import SteadyWindow, steady_window
from tailscope.records import RequestCounts, RequestRecord, Status

_MS = 1e6

#: send lag p99 above this means the client could not keep its schedule (ms).
SEND_LAG_WARN_MS = 5.0
#: event-loop lag p99 above this means the client's loop was saturated (ms).
LOOP_LAG_WARN_MS = 5.0
#: achieved send rate below this fraction of the requested rate means the client fell behind.
RATE_WARN_FRACTION = 0.95


@dataclass(frozen=True, slots=True)
class SloResult:
    """An SLO checked over the run: the observed percentile and the verdict.

    Failed requests count as slower than any limit (+∞), so failures can never make an SLO pass: with failures the
    observed percentile is taken over successes plus ``failed`` values of +∞ (``observed_ms`` is then ∞ when the
    percentile lands on a failure, written as null in JSON).
    """

    slo: Slo
    observed_ms: float | None
    passed: bool
    failed: int = 0  # failed requests counted as +∞

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo.key,
            "threshold_ms": self.slo.threshold_ms,
            "observed_ms": self.observed_ms,
            "passed": self.passed,
            "failed_counted": self.failed,
        }


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
class FirstWave:
    """The run's first wave beside the rest: the requests due before any request had finished (a closed loop's
    slots all start at once; an open loop's opening burst), which the client must get out while it also starts up.

    Attributes:
        count, rest: requests in the first wave / after it.
        send_lag_ms, rest_send_lag_ms: send lag (actual send − intended time) of each group.
        ttft_ms, rest_ttft_ms: TTFT from the intended time of each group's successful requests.
        ttft_from_sent_ms: the first wave's TTFT from the actual send (what the server took once the bytes left).
    """

    count: int
    rest: int
    send_lag_ms: Stats
    rest_send_lag_ms: Stats
    ttft_ms: Stats
    rest_ttft_ms: Stats
    ttft_from_sent_ms: Stats

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "rest": self.rest,
            "send_lag_ms": self.send_lag_ms.to_dict(),
            "rest_send_lag_ms": self.rest_send_lag_ms.to_dict(),
            "ttft_ms": self.ttft_ms.to_dict(),
            "rest_ttft_ms": self.rest_ttft_ms.to_dict(),
            "ttft_from_sent_ms": self.ttft_from_sent_ms.to_dict(),
        }


def first_wave(measured: Sequence[RequestRecord]) -> FirstWave | None:
    """The first wave (requests scheduled before the first one ended) against the rest; None when either is empty."""
    ends = [r.end_ns for r in measured if r.end_ns is not None and r.status is Status.OK]
    if not ends:
        return None
    first_end = min(ends)
    wave = [r for r in measured if r.scheduled_ns < first_end]
    rest = [r for r in measured if r.scheduled_ns >= first_end]
    if len(wave) < 2 or not rest:
        return None

    def lag(rs: Sequence[RequestRecord]) -> Stats:
        return compute_stats([v for r in rs if (v := rq.send_lag_ms(r)) is not None])

    def ttft(rs: Sequence[RequestRecord], from_sent: bool = False) -> Stats:
        return compute_stats([v for r in rs if r.ok and (v := rq.ttft_ms(r, from_sent=from_sent)) is not None])

    return FirstWave(
        count=len(wave),
        rest=len(rest),
        send_lag_ms=lag(wave),
        rest_send_lag_ms=lag(rest),
        ttft_ms=ttft(wave),
        rest_ttft_ms=ttft(rest),
        ttft_from_sent_ms=ttft(wave, True),
    )


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


def _request_value_ms(r: RequestRecord, metric: str) -> float | None:
    if metric == "ttft":
        return rq.ttft_ms(r)
    if metric == "tpot":
        return rq.tpot_ms(r)
    if metric == "e2e":
        return rq.e2e_ms(r)
    if metric == "itl":
        return rq.max_stall_ms(r) if len(r.chunk_times_ns) > 1 else 0.0
    raise KeyError(metric)


def meets_slos(r: RequestRecord, slos: Sequence[Slo]) -> bool:
    """Whether a successful request meets every SLO on its own values (the goodput test)."""
    if not r.ok:
        return False
    for s in slos:
        v = _request_value_ms(r, s.metric)
        if v is not None and v > s.threshold_ms:
            return False
    return True


def _samples(records: Sequence[RequestRecord]) -> dict[str, Any]:
    ttft: list[float] = []
    ttft_sent: list[float] = []
    tpot: list[float] = []
    e2e: list[float] = []
    e2e_sent: list[float] = []
    lag: list[float] = []
    ok: list[RequestRecord] = []
    for r in records:
        v = rq.send_lag_ms(r)
        if v is not None:
            lag.append(v)
        if not r.ok:
            continue
        ok.append(r)
        for dst, val in (
            (ttft, rq.ttft_ms(r)),
            (ttft_sent, rq.ttft_ms(r, from_sent=True)),
            (tpot, rq.tpot_ms(r)),
            (e2e, rq.e2e_ms(r)),
            (e2e_sent, rq.e2e_ms(r, from_sent=True)),
        ):
            if val is not None:
                dst.append(val)
    flat: list[tuple[np.ndarray, np.ndarray]] = []
    stall, itl, icl = _gap_samples(ok, flat)
    return {
        "_flat": flat,
        "ttft": np.asarray(ttft),
        "ttft_sent": np.asarray(ttft_sent),
        "tpot": np.asarray(tpot),
        "e2e": np.asarray(e2e),
        "e2e_sent": np.asarray(e2e_sent),
        "lag": np.asarray(lag),
        "stall": stall,
        "itl": itl,
        "icl": icl,
    }


def _gap_samples(
    ok: Sequence[RequestRecord], flat: list[tuple[np.ndarray, np.ndarray]] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max stall per request, ITL and ICL samples (ms) of ``ok`` in record order, as :mod:`~tailscope.metrics.request`
    computes them one request at a time, vectorised — a long run has millions of token gaps.

    The values are the same bit for bit: integer times are differenced exactly in int64 and then divided, as
    Python's ``(int − int) / 1e6`` is; float times (hand-made records) are differenced in float64, as Python does.
    Times beyond what those represent exactly fall back to the per-request functions. ``flat`` receives
    ``(lengths, times)`` when the times are integers below 2**53 (the perceived block's stall counts reuse them).
    """
    lengths = np.fromiter((len(r.chunk_times_ns) for r in ok), dtype=np.int64, count=len(ok))
    total = int(lengths.sum())
    if total == 0:
        empty = np.asarray([], dtype=np.float64)
        return empty, empty.copy(), empty.copy()
    ints = all(type(x) is int for r in ok for x in r.chunk_times_ns[:1]) and all(
        type(x) is int for r in ok for x in r.chunk_times_ns[-1:]
    )
    try:
        times = np.fromiter(
            chain.from_iterable(r.chunk_times_ns for r in ok), dtype=np.int64 if ints else np.float64, count=total
        )
    except (OverflowError, TypeError, ValueError):
        return _gap_samples_py(ok)
    lim = 2**62 if ints else 2.0**53  # int64 differences cannot overflow / float64 holds the integers exactly
    if not abs(times.max()) < lim or not abs(times.min()) < lim:  # (also catches inf and nan)
        return _gap_samples_py(ok)
    if flat is not None and ints and abs(times.max()) < 2**53 and abs(times.min()) < 2**53:
        flat.append((lengths, times))
    d = np.diff(times)  # d[j] = times[j+1] - times[j]
    starts = np.cumsum(lengths) - lengths
    keep = np.ones(total, dtype=bool)
    keep[starts[lengths > 0]] = False  # a request's first chunk has no gap before it
    inner = keep[1:]
    gaps_ns = d[inner]
    icl = gaps_ns.astype(np.float64) / _MS
    multi = lengths >= 2
    if multi.any():
        # gaps of request i occupy gap_starts[i] ... in gaps_ns (requests with < 2 chunks contribute none)
        n_gaps = np.where(multi, lengths - 1, 0)
        gap_starts = (np.cumsum(n_gaps) - n_gaps)[multi]
        stall = np.maximum.reduceat(gaps_ns, gap_starts).astype(np.float64) / _MS
    else:
        stall = np.asarray([], dtype=np.float64)
    if _all_unit_tokens(ok):
        return stall, icl, icl  # one token per chunk: ITL = ICL (the same array; callers only read it)
    ks = np.fromiter(chain.from_iterable(_chunk_ks(r) for r in ok), dtype=np.int64, count=total)[keep]
    split = ks > 1
    values = np.where(split, icl / np.where(split, ks, 1), icl)
    itl = np.repeat(values, np.where(split, ks, 1))
    return stall, itl, icl


def _all_unit_tokens(ok: Sequence[RequestRecord]) -> bool:
    """Whether no chunk of ``ok`` carries more than one token. Each distinct ``chunk_tokens`` object is checked
    once (simulated records share one tuple per length; the records keep every object alive meanwhile)."""
    seen: set[int] = set()
    for r in ok:
        toks = r.chunk_tokens
        key = id(toks)
        if key in seen:
            continue
        if toks and max(toks) > 1:
            return False
        seen.add(key)
    return True


def _chunk_ks(r: RequestRecord) -> list[int]:
    """Tokens of each chunk of ``r`` as :func:`~tailscope.metrics.request.itl_samples_ms` reads them (missing = 1)."""
    n = len(r.chunk_times_ns)
    toks = list(r.chunk_tokens[:n])
    return toks + [1] * (n - len(toks))


def _gap_samples_py(ok: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stall: list[float] = []
    itl: list[float] = []
    icl: list[float] = []
    for r in ok:
        v = rq.max_stall_ms(r)
        if v is not None:
            stall.append(v)
        itl.extend(rq.itl_samples_ms(r))
        icl.extend(rq.icl_samples_ms(r))
    return np.asarray(stall), np.asarray(itl), np.asarray(icl)


def _error_adjusted_p99(ok_values: np.ndarray, n_failed: int) -> float | None:
    """p99 with every failed request counted as +∞ (so failures cannot make the tail look better)."""
    if ok_values.size + n_failed == 0:
        return None
    arr = np.concatenate([ok_values, np.full(n_failed, np.inf)])
    # linear interpolation toward +inf would give inf for any neighbour; use the 'higher' rule here
    return float(np.quantile(arr, 0.99, method="higher"))


def summarize(
    records: Iterable[RequestRecord],
    *,
    slos: Sequence[Slo] = (),
    requested_rate_rps: float | None = None,
    loop_lag_ms: Stats | None = None,
    by_class: bool = True,
    perceived_thresholds: PerceivedThresholds | None = None,
    max_in_flight: int | None = None,
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
    """
    all_records = list(records)
    measured = [r for r in all_records if not r.warmup]
    warmup = len(all_records) - len(measured)
    ok = [r for r in measured if r.status is Status.OK]
    failed = [r for r in measured if r.status is Status.ERROR]
    incomplete = [r for r in measured if r.status is Status.INCOMPLETE]
    counts = RequestCounts(
        total=len(measured), completed=len(ok), failed=len(failed), incomplete=len(incomplete), warmup=warmup
    )

    window_s = _window_s(measured)
    out_tokens = sum(rq.output_token_count(r) for r in ok)
    in_tokens = sum(r.input_tokens or 0 for r in ok)
    good = sum(1 for r in ok if meets_slos(r, slos))
    s = _samples(measured)

    errors = Counter((r.error.value if r.error else "unknown") for r in failed)
    slo_results = tuple(_check_slo(slo, s, len(failed)) for slo in slos)

    achieved = _achieved_rate(measured)
    lag_stats = compute_stats(s["lag"])
    wave = first_wave(measured) if by_class else None
    warnings = _warnings(
        counts, errors, lag_stats, loop_lag_ms, requested_rate_rps, achieved, ok, wave, cap=max_in_flight
    )
    if failed:
        warnings = (*warnings, *_server_messages(failed))
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
        output_tokens=compute_stats([float(rq.output_token_count(r)) for r in ok]),
        output_tokens_per_s=rate(out_tokens),
        total_tokens_per_s=rate(out_tokens + in_tokens),
        requests_per_s=rate(len(ok)),
        goodput_rps=rate(good),
        error_adjusted_ms={
            "ttft_p99": _error_adjusted_p99(s["ttft"], len(failed)),
            "e2e_p99": _error_adjusted_p99(s["e2e"], len(failed)),
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
            flat_times=s["_flat"][0] if s["_flat"] else None,
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


def _scheduled_rate(measured: Sequence[RequestRecord]) -> float | None:
    sched = sorted(r.scheduled_ns for r in measured)
    if len(sched) < 2 or sched[-1] == sched[0]:
        return None
    return (len(sched) - 1) / ((sched[-1] - sched[0]) / 1e9)


def _check_slo(slo: Slo, s: dict[str, np.ndarray], n_failed: int = 0) -> SloResult:
    samples = s[slo.metric]
    observed: float | None
    if n_failed:
        # failures are slower than any limit: +∞ in the sample ('higher' rule: interpolating toward ∞ gives ∞)
        with_failures = np.concatenate([samples, np.full(n_failed, np.inf)])
        if slo.percentile == "mean":
            observed = math.inf
        else:
            observed = float(np.quantile(with_failures, percentile_fraction(slo.percentile), method="higher"))
    elif slo.percentile == "mean":
        observed = float(samples.mean()) if samples.size else None
    else:
        observed = quantile(samples, percentile_fraction(slo.percentile))
    passed = observed is not None and observed <= slo.threshold_ms
    return SloResult(slo=slo, observed_ms=observed, passed=passed, failed=n_failed)


def _server_messages(failed: Sequence[RequestRecord], *, limit: int = 3) -> tuple[str, ...]:
    """The first failure's own message per error class (what the server said, not only a count), most common first."""
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for r in failed:
        key = r.error.value if r.error else "unknown"
        counts[key] += 1
        if key not in first and r.error_detail:
            first[key] = r.error_detail
    out: list[str] = []
    for key, n in counts.most_common():
        if key in first and len(out) < limit:
            out.append(f"{key} ({n}): {first[key][:300]}")
    return tuple(out)


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} ms"


def _warnings(
    counts: RequestCounts,
    errors: Counter[str],
    lag: Stats,
    loop_lag: Stats | None,
    requested_rate: float | None,
    achieved: float | None,
    ok: Sequence[RequestRecord],
    wave: FirstWave | None = None,
    cap: int | None = None,
) -> tuple[str, ...]:
    out: list[str] = []
    if wave is not None and wave.rest_send_lag_ms.p99 is not None and cap is None:
        # the opening burst is reported on its own (below): the schedule judgement is on the rest of the run
        wl = wave.send_lag_ms.p99
        if wl is not None and wl > SEND_LAG_WARN_MS:
            out.append(
                f"FIRST WAVE: the {wave.count} requests due at the start went out with send lag p99 {wl:.1f} ms "
                f"(the rest {wave.rest_send_lag_ms.p99:.1f} ms); their TTFT from the intended time carries it "
                f"(TTFT p99 {_fmt(wave.ttft_ms.p99)} vs {_fmt(wave.rest_ttft_ms.p99)} for the rest; "
                f"{_fmt(wave.ttft_from_sent_ms.p99)} from the actual send)."
            )
        lag = wave.rest_send_lag_ms
    late = lag.p99 is not None and lag.p99 > SEND_LAG_WARN_MS
    slow = bool(requested_rate and achieved is not None and achieved < RATE_WARN_FRACTION * requested_rate)
    if cap is not None and (late or slow):
        # a capped open loop: requests that waited for a slot went out late; that is the cap, not the client
        out.append(
            f"CAP REACHED: send lag p99 is {lag.p99 or 0:.1f} ms: requests waited for one of the {cap} slots "
            "(--rate with --concurrency); their latencies count the wait from the intended send time. With "
            f"{cap} in flight the target serves fewer requests/s than offered: raise the cap or lower the rate."
        )
        late = slow = False
    if late and lag.p99 is not None:
        out.append(
            f"CLIENT BOTTLENECK: send lag p99 is {lag.p99:.1f} ms (> {SEND_LAG_WARN_MS:g} ms); the client could not "
            "send on schedule. Latencies are still measured from the intended send time, but lower the load per "
            "process or use --workers."
        )
    if loop_lag is not None and loop_lag.p99 is not None and loop_lag.p99 > LOOP_LAG_WARN_MS:
        out.append(
            f"CLIENT BOTTLENECK: the client's event loop lagged {loop_lag.p99:.1f} ms at p99 (> "
            f"{LOOP_LAG_WARN_MS:g} ms); token timings carry that much client delay. Use --workers or fewer streams."
        )
    if slow and requested_rate and achieved is not None:
        out.append(
            f"CLIENT BOTTLENECK: achieved send rate {achieved:.2f} req/s is below 95 % of the requested "
            f"{requested_rate:.2f} req/s."
        )
    if counts.failed:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(errors.items()))
        out.append(f"{counts.failed} of {counts.total} requests failed ({detail}).")
    if counts.incomplete:
        out.append(f"{counts.incomplete} requests were still in flight when the run stopped (counted as incomplete).")
    uneven = sum(
        1
        for r in ok
        if r.tokens_source.value == "chunks"
        and r.output_tokens is not None
        and r.output_tokens != len(r.chunk_times_ns)
    )
    if uneven:
        out.append(
            f"{uneven} requests streamed chunks holding several tokens but the server gave no per-chunk counts; ITL "
            "assumes one token per chunk there. Pass --tokenizer for per-chunk counts."
        )
    return tuple(out)
