"""From a profile to the request stream: class mix, rate stages, bursts, sessions, shared prefixes, warmup, stop.

Open loop: arrival times come from a piecewise-linear rate curve λ(t) (constant stages and linear ramps) by
*time rescaling*: gaps are drawn in "operational time" Λ (the integrated rate) from a unit-mean process — exponential
for ``poisson``, gamma with shape ``burstiness`` for ``gamma``, exactly 1 for ``constant`` — and mapped back through
Λ⁻¹. For a Poisson process this gives exactly the non-homogeneous Poisson process with intensity λ(t). The phase
carries across stage boundaries and the first request is sent at t = 0. Bursts add ``count`` requests at ``at_s``.

Sessions: each arrival picks a class by weight. A session class yields turn 0 at the arrival time and, right after it
in the stream, turns 1…n−1 with ``at_ns=None`` and a sampled ``think_time_ns``; the runner sends turn k that long
after turn k−1 completed, with the conversation so far in front of the new text. Only turn 0 carries the shared
prefix (later turns already have it in their history). An agent class's arrival is one session drawn from its call
graph (:mod:`tailscope.workload.agent`): its calls follow in dispatch order, each with ``after`` (the calls it waits
for and its tool gap) and ``step``; every call carries the shared prefix (an agent's system prompt). Same profile and
seed → the same stream.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tailscope.errors import ConfigError
from tailscope.units import NS_PER_S
from tailscope.workload.agent import draw_session
from tailscope.workload.profile import (
    Arrival,
    DatasetPrompt,
    Overrides,
    Profile,
    RequestClass,
    Stage,
    apply_overrides,
)
from tailscope.workload.spec import RequestSpec


@dataclass(frozen=True, slots=True)
class StageWindow:
    """A timed stage on the run's clock: ``kind`` rate|ramp, rates at both ends (requests/s), seconds from start."""

    index: int
    kind: str
    start_s: float
    end_s: float | None
    rate_start: float
    rate_end: float

    @property
    def steady(self) -> bool:
        """True for a constant-rate stage (the place to look for over-saturation)."""
        return self.kind == "rate"


def stage_windows(arrival: Arrival, *, duration_s: float | None = None) -> list[StageWindow]:
    """The timed stages of an open-loop rate curve, laid end to end (bursts excluded).

    A last stage without ``duration_s`` runs until ``duration_s`` (the stop); a ``duration_s`` shorter than the
    stages cuts the curve there. A curve that ends before the stop leaves the rest of the run for draining.
    """
    out: list[StageWindow] = []
    t = 0.0
    prev = 0.0
    for i, st in enumerate(arrival.stages):
        if st.kind == "burst":
            continue
        r0 = st.rate if st.kind == "rate" else (st.ramp_from if st.ramp_from is not None else prev)
        end = None if st.duration_s is None else t + st.duration_s
        out.append(StageWindow(i, st.kind, t, end, r0, st.rate))
        prev = st.rate
        if end is None:
            break
        t = end
    if duration_s is not None:
        cut: list[StageWindow] = []
        for w in out:
            if w.start_s >= duration_s:
                break
            end = duration_s if w.end_s is None or w.end_s > duration_s else w.end_s
            r_end = w.rate_end
            if w.kind == "ramp" and w.end_s is not None and w.end_s > duration_s:
                r_end = w.rate_start + (w.rate_end - w.rate_start) * (end - w.start_s) / (w.end_s - w.start_s)
            cut.append(StageWindow(w.index, w.kind, w.start_s, end, w.rate_start, r_end))
        out = cut
    return out


def _unit_gap(process: str, rng: random.Random, burstiness: float) -> float:
    """One gap in operational time (mean 1)."""
    if process == "constant":
        return 1.0
    if process == "poisson":
        return rng.expovariate(1.0)
    if process == "gamma":
        return rng.gammavariate(burstiness, 1.0 / burstiness)
    raise ConfigError(f"arrival.process {process!r}: use constant, poisson or gamma")


def _invert(w: StageWindow, lam: float) -> float:
    """Seconds after ``w.start_s`` at which the integrated rate of the window reaches ``lam``."""
    r0 = w.rate_start
    if w.kind == "rate" or w.end_s is None or w.rate_end == r0:
        return lam / r0
    a = (w.rate_end - r0) / (2.0 * (w.end_s - w.start_s))
    disc = max(0.0, r0 * r0 + 4.0 * a * lam)
    return (-r0 + math.sqrt(disc)) / (2.0 * a) if a != 0 else lam / r0


def arrival_times_s(
    arrival: Arrival,
    rng: random.Random,
    *,
    duration_s: float | None = None,
    max_count: int | None = None,
) -> list[float]:
    """Open-loop send times in seconds from the run start (sorted), bursts included.

    Raises:
        ConfigError: when neither the stages, ``duration_s`` nor ``max_count`` bound the schedule.
    """
    windows = stage_windows(arrival, duration_s=duration_s)
    if windows and windows[-1].end_s is None and max_count is None:
        raise ConfigError("an open-loop run needs stop.duration_s, stop.requests or timed stages (runs are bounded)")
    times: list[float] = []
    remaining = 0.0  # operational-time distance to the next arrival; 0 → the first request goes at t = 0
    for w in windows:
        if max_count is not None and len(times) >= max_count:
            break
        span = None if w.end_s is None else w.end_s - w.start_s
        if span is not None:
            total = (w.rate_start + w.rate_end) / 2.0 * span if w.kind == "ramp" else w.rate_start * span
        else:
            total = math.inf if w.rate_start > 0 else 0.0
        pos = 0.0
        while max_count is None or len(times) < max_count:
            if pos + remaining >= total:
                remaining -= total - pos if math.isfinite(total) else 0.0
                break
            pos += remaining
            times.append(w.start_s + _invert(w, pos))
            remaining = _unit_gap(arrival.process, rng, arrival.burstiness)
    for st in arrival.stages:
        if st.kind == "burst" and (duration_s is None or st.at_s < duration_s):
            times.extend([st.at_s] * st.count)
    times.sort()
    if max_count is not None:
        del times[max_count:]
    return times


def _pick(classes: Sequence[RequestClass], cum: Sequence[float], rng: random.Random) -> RequestClass:
    x = rng.random() * cum[-1]
    for c, edge in zip(classes, cum, strict=True):
        if x < edge:
            return c
    return classes[-1]


def profile_requests(profile: Profile, *, seed: int, overrides: Overrides | None = None) -> Iterator[RequestSpec]:
    """The request stream of a profile (CLI ``overrides`` applied first: CLI > file > defaults).

    Args:
        profile: a validated profile.
        seed: master seed; arrivals, class mix, lengths, sessions and prefixes each get their own stream from it.
        overrides: command-line values that replace profile fields.

    Yields:
        Specs in id order. Open loop: turn-0/single requests carry ``at_ns``; session turns > 0 follow their turn 0
        with ``at_ns=None``. Closed loop: every ``at_ns`` is None; with only a duration bound the stream is endless
        (the runner stops pulling).

    Raises:
        ConfigError: for an unbounded or contradictory profile.
    """
    p = apply_overrides(profile, overrides)
    stop, arr = p.stop, p.arrival
    if stop.requests is None and stop.duration_s is None and not _stages_bounded(arr):
        raise ConfigError(
            f"{p.name}: give stop.requests or stop.duration_s (or --requests/--duration): runs are bounded"
        )
    if arr.mode == "closed" and (arr.concurrency is None or arr.concurrency < 1):
        raise ConfigError(f"{p.name}: closed loop needs arrival.concurrency ≥ 1 (or --concurrency)")
    if arr.mode == "open" and not arr.stages:
        raise ConfigError(f"{p.name}: open loop needs arrival.rate or arrival.stages (or --rate)")
    rng_arr = random.Random(seed ^ 0xA11_1FA1)
    rng_mix = random.Random(seed ^ 0x31C5)
    rng_len = random.Random(seed)
    rng_ses = random.Random(seed ^ 0x5E55_1014)
    rng_pre = random.Random(seed ^ 0x9EF1)
    rng_agent = random.Random(seed ^ 0xA6E7)
    starts: list[float] | None = None
    if arr.mode == "open":
        starts = arrival_times_s(arr, rng_arr, duration_s=stop.duration_s, max_count=stop.requests)
    cum: list[float] = []
    acc = 0.0
    for c in p.classes:
        acc += c.weight
        cum.append(acc)
    sp = p.shared_prefix
    rows: dict[str, Iterator[DatasetPrompt]] = {}  # per dataset class: its rows in their seeded order
    i = 0
    unit = 0
    while True:
        if starts is not None and unit >= len(starts):
            return
        at_ns = round(starts[unit] * NS_PER_S) if starts is not None else None
        cls = _pick(p.classes, cum, rng_mix)
        prefix_id: int | None = None
        prefix_tokens = 0
        if sp is not None and rng_pre.random() < sp.share:
            prefix_id = rng_pre.randrange(sp.variants)
            prefix_tokens = sp.tokens
        unit_warm = p.warmup.duration_s > 0 and at_ns is not None and at_ns < p.warmup.duration_s * NS_PER_S
        if cls.dataset is not None:  # a real prompt per arrival: no synthesized text, so no shared prefix either
            row = next(rows.setdefault(cls.name, _shuffled(cls.dataset.prompts, random.Random(f"{seed}:{cls.name}"))))
            yield RequestSpec(
                id=i,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens if row.output_tokens is not None else cls.output_tokens.sample(rng_len),
                at_ns=at_ns,
                request_class=cls.name,
                priority=cls.priority,
                warmup=i < p.warmup.requests or unit_warm,
                seed=seed * 1_000_003 + i,
                prompt=row.prompt,
                messages=row.messages,
            )
            i += 1
            unit += 1
            if stop.requests is not None and i >= stop.requests:
                return
            continue
        if cls.agent is not None:
            calls = draw_session(cls.agent, rng_agent, input_tokens=cls.input_tokens, output_tokens=cls.output_tokens)
            warm = i < p.warmup.requests or unit_warm  # a session is measured whole or not at all
            for k, call in enumerate(calls[: None if stop.requests is None else max(0, stop.requests - i)]):
                yield RequestSpec(
                    id=i + k,
                    input_tokens=call.input_tokens + prefix_tokens,
                    output_tokens=call.output_tokens,
                    at_ns=at_ns if not call.deps else None,
                    request_class=cls.name,
                    priority=cls.priority,
                    prefix_id=prefix_id,  # an agent's system prompt comes with every call
                    prefix_tokens=prefix_tokens,
                    session_id=f"s{unit}",
                    turn=k,
                    warmup=warm,
                    seed=seed * 1_000_003 + i + k,
                    after=tuple((i + d, gap) for d, gap in call.deps),
                    step=call.step,
                    answers_from=tuple(i + a for a in call.answers_from),
                    session_calls=len(calls),
                    prompt_template=call.prompt_template,
                )
            i += len(calls)
            if stop.requests is not None and i >= stop.requests:
                return
            unit += 1
            continue
        turns = cls.session.turns.sample(rng_ses) if cls.session is not None else 1
        session_id = f"s{unit}" if cls.session is not None else None
        for turn in range(turns):
            if stop.requests is not None and i >= stop.requests:
                return
            think = 0
            if turn > 0 and cls.session is not None:
                think = round(cls.session.think_time_s.sample(rng_ses) * NS_PER_S)
            new_tokens = cls.input_tokens.sample(rng_len)
            first = turn == 0
            yield RequestSpec(
                id=i,
                input_tokens=new_tokens + (prefix_tokens if first else 0),
                output_tokens=cls.output_tokens.sample(rng_len),
                at_ns=at_ns if first else None,
                request_class=cls.name,
                priority=cls.priority,
                prefix_id=prefix_id if first else None,
                prefix_tokens=prefix_tokens if first else 0,
                session_id=session_id,
                turn=turn if session_id is not None else None,
                think_time_ns=think,
                warmup=i < p.warmup.requests or unit_warm,
                seed=seed * 1_000_003 + i,
            )
            i += 1
        unit += 1


def _shuffled(prompts: tuple[DatasetPrompt, ...], rng: random.Random) -> Iterator[DatasetPrompt]:
    """A dataset class's rows forever: one seeded permutation after another (rows repeat only past the end)."""
    while True:
        order = list(range(len(prompts)))
        rng.shuffle(order)
        yield from (prompts[k] for k in order)


def _stages_bounded(arr: Arrival) -> bool:
    timed = [s for s in arr.stages if s.kind != "burst"]
    return arr.mode == "open" and bool(timed) and all(s.duration_s is not None for s in timed)


def offered_rate(stages: Sequence[Stage], t_s: float) -> float:
    """The scheduled rate λ(t) in requests/s at ``t_s`` seconds (bursts excluded; 0 after the last timed stage)."""
    for w in stage_windows(Arrival(stages=tuple(stages))):
        if t_s >= w.start_s and (w.end_s is None or t_s < w.end_s):
            if w.kind == "rate" or w.end_s is None:
                return w.rate_start
            return w.rate_start + (w.rate_end - w.rate_start) * (t_s - w.start_s) / (w.end_s - w.start_s)
    return 0.0
