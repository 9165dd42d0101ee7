"""Fuzzing whole bench runs: random combinations of options and workload profiles against a live engine.

Each case is a set of :func:`tailscope.bench` keyword arguments (and sometimes a generated profile file), drawn from
valid, edge and invalid values of every option. A case must either run (bounded: a few requests, a second at most)
or be refused with a :class:`~tailscope.errors.TailscopeError` whose message says what to do — never an
:class:`~tailscope.errors.InternalError` (an unexpected exception) — and the store it wrote must stay readable.
Used by ``tests/integration/test_fuzz_bench.py`` (a few hundred cases) and ``benchmarks/fuzz_bench.py`` (≥ 10,000).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: (valid values, invalid or edge values) per option; an invalid one is drawn with probability ``P_BAD``
_ENDPOINTS = (["chat", "completions", None], ["embeddings", ""])
_ARRIVALS = (["poisson", "constant", "gamma", None], ["weibull", ""])
_LENGTHS = (
    ["1", "8", "64", "256", "uniform:8:64", "normal:32:8", "lognormal:40:0.6", "lognormal:40:0.6:min=5:max=300", 16],
    ["0", "-3", "uniform:64:8", "normal:0:0", "1e12", "10000001", "abc", "uniform:1", "", " 16 ", 0, -1],
)
_SLOS = (
    ["ttft_p99=1.5s", "tpot_p99=60ms", "e2e_p50=2s", "itl_p99.9=200ms"],
    ["ttft_p101=1s", "ttft=1s", "x=1", "ttft_p99"],
)
_TRACE = (["off", "on", "0.5", 0.25, 1.0, 0.0, True, False], ["2", "-0.1", "maybe"])
_EXTRA = ([None, {"temperature": 0.5}, '{"top_p": 0.9}'], ['{"stream": false}', "[1,2]", "{bad json", {"model": "x"}])
_HEADERS = ([(), ("X-A: 1",), ("X-Tenant: blue", "X-B:2")], [("X-A 1",), ("Host: x",), ("X-B:\r\nInjected: 1",)])

#: the chance that one drawn option is invalid or an edge value (about half the cases stay valid overall)
P_BAD = 0.07


def _pick(rng: random.Random, choices: tuple[list[Any], list[Any]]) -> Any:
    good, bad = choices
    return rng.choice(bad) if rng.random() < P_BAD else rng.choice(good)


@dataclass(frozen=True, slots=True)
class Case:
    """One fuzz case: keyword arguments of :func:`tailscope.bench` and an optional profile text."""

    kwargs: dict[str, Any]
    profile: str | None = None
    notes: tuple[str, ...] = field(default=())


def _maybe(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _number(rng: random.Random, good: tuple[float, float], *, integer: bool) -> Any:
    r = rng.random()
    if r >= P_BAD:
        lo, hi = good
        v = rng.uniform(lo, hi)
        return round(v) if integer else round(v, 3)
    edge: list[Any] = [0, -1, 10**12, 1e300, math.inf, -math.inf, math.nan] if not integer else [0, -1, 10**12, 2**63]
    return rng.choice(edge)


def _profile(rng: random.Random) -> str:
    """A profile: mostly valid and small, sometimes with a wrong field or value."""
    classes = []
    for i in range(rng.randint(1, 3)):
        weight = rng.choice([1, 2, 0.5, 1, 0 if _maybe(rng, P_BAD) else 3])
        cls = f"  - {{name: c{i}, weight: {weight}, input_tokens: {rng.choice(_LENGTHS[0][:8])!r}, "
        cls += f"output_tokens: {rng.choice(['4', '8', 'uniform:2:6', '0' if _maybe(rng, P_BAD) else '2'])!r}"
        if _maybe(rng, 0.2):
            cls += (
                ", session: {turns: "
                + rng.choice(["2", "uniform:1:3", "0" if _maybe(rng, P_BAD) else "1"])
                + ", think_time_s: 0.01}"
            )
        if _maybe(rng, 0.1):
            cls += ", extra_body: {temperature: 0.2}"
        if _maybe(rng, P_BAD / 2):
            cls += ", colour: red"
        classes.append(cls + "}")
    mode = rng.choice(["closed", "open", "open", "replay" if _maybe(rng, P_BAD) else "closed"])
    if mode == "closed":
        arrival = f"arrival: {{mode: closed, concurrency: {rng.choice([1, 2, 4, 0 if _maybe(rng, P_BAD) else 3])}}}"
    else:
        stage = rng.choice(
            [
                "{rate: 20, duration_s: 0.3}",
                "{burst: 3}",
                "{ramp_to: 10, duration_s: 0.3}",
                "{rate: -1}" if _maybe(rng, P_BAD) else "{rate: 40, duration_s: 0.3}",
            ]
        )
        arrival = f"arrival: {{mode: {mode or 'open'}, stages: [{stage}]}}"
    stop = rng.choice(
        ["stop: {requests: 4}", "stop: {duration_s: 0.5}", "stop: {requests: 3, duration_s: 1}", "stop: {}"]
    )
    parts = [f"name: fuzz{rng.randint(0, 99)}", "classes:", *classes, arrival, stop]
    if _maybe(rng, 0.2):
        parts.append(f"shared_prefix: {{tokens: {rng.choice([4, 16, 0])}, variants: 2, share: 0.5}}")
    if _maybe(rng, 0.2):
        parts.append(f"warmup: {{requests: {rng.choice([0, 1, 5])}}}")
    if _maybe(rng, 0.1):
        parts.append("slo: {ttft_p99: 2s}")
    return "\n".join(parts) + "\n"


def draw_case(rng: random.Random) -> Case:
    """One random case (about half of them run; the others are refused for one bad value)."""
    kw: dict[str, Any] = {}
    profile = _profile(rng) if _maybe(rng, 0.2) else None
    if profile is None:
        if _maybe(rng, 0.5):
            kw["concurrency"] = _number(rng, (1, 8), integer=True)
        if (_maybe(rng, 0.5) or "concurrency" not in kw) and _maybe(rng, 0.7):
            kw["rate"] = _number(rng, (20, 400), integer=False)  # fast schedules: a case is cheap
        if _maybe(rng, 0.3):
            kw["arrival"] = _pick(rng, _ARRIVALS)
        if _maybe(rng, 0.2):
            kw["burstiness"] = _number(rng, (0.2, 3), integer=False)
        bound = rng.random()
        if bound < 0.7:
            kw["requests"] = _number(rng, (1, 6), integer=True)
        elif bound < 0.95:
            kw["duration"] = _number(rng, (0.1, 0.4), integer=False)
            if isinstance(kw.get("rate"), float) and 60 < kw["rate"] < 401:  # a timed run: ≤ ~25 requests
                kw["rate"] = round(kw["rate"] / 8, 3)
        if _maybe(rng, 0.2):
            kw["warmup"] = _number(rng, (0, 3), integer=True)
        if _maybe(rng, 0.5):
            kw["input_tokens"] = _pick(rng, _LENGTHS)
        kw["output_tokens"] = _pick(rng, _LENGTHS)
    else:
        # bound every profile run, whatever its stop says
        kw["requests"] = rng.choice([3, 5])
        kw["duration"] = 0.5
    if _maybe(rng, 0.15):
        kw["endpoint"] = _pick(rng, _ENDPOINTS)
    if _maybe(rng, 0.2):
        kw["seed"] = _number(rng, (0, 1000), integer=True)
    if _maybe(rng, 0.2):
        kw["slo"] = tuple(_pick(rng, _SLOS) for _ in range(rng.randint(1, 2)))
    if _maybe(rng, 0.1):
        kw["timeout_total"] = _number(rng, (1, 30), integer=False)
    if _maybe(rng, 0.1):
        kw["max_rate"] = _number(rng, (1, 100), integer=False)
    if _maybe(rng, 0.1):
        kw["trace_context"] = _pick(rng, _TRACE)
    if _maybe(rng, 0.1):
        kw["extra_body"] = _pick(rng, _EXTRA)
    if _maybe(rng, 0.1):
        kw["headers"] = _pick(rng, _HEADERS)
    if _maybe(rng, 0.05):
        kw["same_prompts"] = True
    if _maybe(rng, 0.05):
        kw["http_client"] = _pick(rng, (["raw", "aiohttp"], ["curl"]))
    return Case(kwargs=kw, profile=profile)


def run_case(case: Case, url: str, store: Path, workdir: Path) -> BaseException | None:
    """Run one case against ``url`` (metrics scraping off); return the unexpected exception, or None.

    A :class:`~tailscope.errors.TailscopeError` with a message is an expected refusal; an
    :class:`~tailscope.errors.InternalError` (what the API raises for a foreign exception) is a bug.
    """
    import tailscope
    from tailscope.errors import InternalError, TailscopeError

    kwargs = dict(case.kwargs)
    if case.profile is not None:
        path = workdir / "profile.yaml"
        path.write_text(case.profile)
        kwargs["profile"] = path
    try:
        tailscope.bench(url, metrics_url="off", store=store, **kwargs)
    except InternalError as exc:
        return exc
    except TailscopeError as exc:
        if not str(exc).strip():
            return AssertionError("a TailscopeError without a message")
        return None
    except Exception as exc:  # the API must never let one escape
        return exc
    return None


def store_readable(store: Path) -> BaseException | None:
    """Whether the store still opens and lists its runs (``None``) or the exception that says why not."""
    import tailscope

    try:
        tailscope.list_runs(store=store)
    except Exception as exc:
        return exc
    return None
