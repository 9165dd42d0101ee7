"""Fitting the digital twin from records: what runs can be fitted (:func:`check_fit_inputs`), the fit itself
(:func:`fit_from_runs`), the server's prompt-length scale, and the busy front end fitted by simulating the probe's
open-loop phase on the twin (:func:`fit_busy_frontend`). The probe that produces the records is in
``runner/calibrate.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tailscope.engine.twin import ServerFacts, TwinModel
from tailscope.engine.twin_fit import busy_frontend_excess, fit_twin
from tailscope.engine.twin_observe import observations
from tailscope.engine.twin_prior import TwinPrior
from tailscope.errors import ConfigError
from tailscope.metrics import request as rq
from tailscope.records import RequestRecord
from tailscope.workload.spec import RequestSpec

__all__ = [
    "check_fit_inputs",
    "fit_busy_frontend",
    "fit_from_runs",
    "fit_inputs",
    "open_loop_send_lags",
    "open_loop_specs",
    "with_prompt_scale",
]


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


def fit_from_runs(
    runs: list[list[RequestRecord]], facts: ServerFacts, *, seed: int = 0, prior: TwinPrior | None = None
) -> TwinModel:
    """Fit a twin from the records of several runs (probe runs, or ordinary bench runs); with ``prior``, as that
    prior's update (:func:`~tailscope.engine.twin_fit.fit_twin`).

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
    return fit_twin(pre, dec, facts, loaded_ttft=loaded, seed=seed, prior=prior)
