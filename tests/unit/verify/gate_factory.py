"""Crafted runs for the gate, compare and diagnose tests (vectorised, seeded)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status
from tailscope.verify.rundata import RunData

MS = 1_000_000


def record(
    i: int,
    *,
    sched_ms: float,
    ttft_ms: float,
    tpot_ms: float = 20.0,
    n_out: int = 16,
    input_tokens: int = 256,
    lag_ms: float = 0.0,
    status: Status = Status.OK,
    error: ErrorClass | None = None,
    request_class: str = "default",
    gaps_ms: Sequence[float] | None = None,
    shared_prefix: bool = False,
    warmup: bool = False,
) -> RequestRecord:
    """One request: first token ``ttft_ms`` after schedule, then ``n_out - 1`` tokens ``tpot_ms`` apart (or
    ``gaps_ms``)."""
    sched = round(sched_ms * MS)
    sent = sched + round(lag_ms * MS)
    if status is not Status.OK:
        return RequestRecord(
            id=i, scheduled_ns=sched, sent_ns=sent, first_token_ns=None, end_ns=sent + 5 * MS, status=status,
            error=error or ErrorClass.HTTP_5XX, request_class=request_class, input_tokens=input_tokens,
            http_status=429 if error is ErrorClass.HTTP_429 else 500, warmup=warmup,
        )  # fmt: skip
    first = sched + round(ttft_ms * MS)
    gaps = list(gaps_ms) if gaps_ms is not None else [tpot_ms] * (n_out - 1)
    times = [first]
    for g in gaps:
        times.append(times[-1] + round(g * MS))
    return RequestRecord(
        id=i, scheduled_ns=sched, sent_ns=sent, first_token_ns=first, end_ns=times[-1], status=Status.OK,
        request_class=request_class, input_tokens=input_tokens, output_tokens=len(times),
        chunk_times_ns=tuple(times), chunk_tokens=(1,) * len(times), shared_prefix=shared_prefix, warmup=warmup,
    )  # fmt: skip


def lognormal_run(
    run_id: str,
    n: int,
    *,
    seed: int,
    ttft_median_ms: float = 200.0,
    sigma: float = 0.5,
    tpot_ms: float = 20.0,
    n_out: int = 8,
    rate_rps: float = 20.0,
    error_every: int = 0,
) -> RunData:
    """A run whose TTFTs are lognormal; requests ``1/rate`` apart; optionally every k-th request fails."""
    rng = np.random.default_rng(seed)
    ttfts = ttft_median_ms * np.exp(sigma * rng.standard_normal(n))
    tpots = tpot_ms * np.exp(0.1 * rng.standard_normal(n))
    recs = []
    for i in range(n):
        failed = error_every > 0 and i % error_every == 0
        recs.append(
            record(
                i,
                sched_ms=i * 1000.0 / rate_rps,
                ttft_ms=float(ttfts[i]),
                tpot_ms=float(tpots[i]),
                n_out=n_out,
                status=Status.ERROR if failed else Status.OK,
            )
        )
    return RunData(id=run_id, records=tuple(recs))


def gauge(name: str, values: Sequence[float], *, step_ms: float = 1000.0) -> list[ServerSample]:
    """A scraped gauge/counter series, one sample per ``step_ms``."""
    return [ServerSample(t_ns=round(k * step_ms * MS), name=name, value=float(v)) for k, v in enumerate(values)]
