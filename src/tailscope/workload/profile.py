"""The pure workload-profile model: frozen dataclasses built from a validated profile file (or from code).

:mod:`tailscope.io.profile` reads YAML with pydantic at the file boundary and converts to these;
:mod:`tailscope.workload.profile_stream` turns them into :class:`~tailscope.workload.spec.RequestSpec` streams.
Nothing here does IO. Command-line overrides are applied with :func:`apply_overrides` (CLI > file > defaults).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tailscope.metrics.slo import Slo
from tailscope.workload.agent import AgentGraph
from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import LengthDist


@dataclass(frozen=True, slots=True)
class SessionShape:
    """Multi-turn conversations: how many turns and how long the user thinks between them.

    Attributes:
        turns: turns per session (≥ 1).
        think_time_s: pause after a response before the next turn is sent, in seconds.
    """

    turns: LengthDist
    think_time_s: FloatDist


@dataclass(frozen=True, slots=True)
class DatasetPrompt:
    """One row of a class's dataset: what is sent and its lengths.

    Attributes:
        prompt: the user text (``None`` when ``messages`` is given); messages: a chat sent verbatim.
        input_tokens: its estimated prompt length.
        output_tokens: ``max_tokens``: the row's own, else its reference answer's length (unless the class gives
            ``output_tokens``), else the default; None = drawn from the class's ``output_tokens``.
    """

    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None
    input_tokens: int
    output_tokens: int | None


@dataclass(frozen=True, slots=True)
class ClassDataset:
    """A class's prompts from a dataset file (``dataset: FORMAT:PATH``): each arrival of the class sends one row, in a
    seeded random order that starts over (a new permutation) when the run outlasts the file."""

    ref: str
    prompts: tuple[DatasetPrompt, ...]


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One class of the business mix.

    Attributes:
        name: class name (appears in records and per-class summaries).
        weight: relative share of arrivals (weights are normalised over classes).
        input_tokens: new prompt tokens per request (per turn for sessions; history is carried on top).
        output_tokens: ``max_tokens`` per request.
        session: multi-turn shape, or None for single requests.
        extra_body: JSON fields merged into this class's request bodies (sampling parameters, tools, …).
        model: the model (or LoRA adapter name) this class's requests ask for; None = the run's model. One run can
            so split its traffic across the models a server serves.
        priority: scheduling priority of the class in ``sim`` (lower first, vLLM's convention; default 0): an
            interactive class at 0 ahead of a batch class at 1.
        agent: each arrival is an agent session shaped as this call graph (:mod:`tailscope.workload.agent`); its
            steps' lengths default to ``input_tokens``/``output_tokens``. None = single requests (or ``session``).
        dataset: each arrival sends one prompt of this dataset (``input_tokens`` is then the rows' lengths, for
            checks and display); None = synthesized prompts.
    """

    name: str
    weight: float
    input_tokens: LengthDist
    output_tokens: LengthDist
    session: SessionShape | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    priority: int = 0
    agent: AgentGraph | None = None
    dataset: ClassDataset | None = None


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """System prompts shared across requests: ``variants`` prefixes of ``tokens`` tokens used by ``share`` of them.

    Attributes:
        hit_rate: the prompt-token prefix-cache hit rate the profile asked for (``tokens`` or ``share`` were solved
            from it: :func:`prefix_for_hit_rate`), recorded with the run; None when both were given.
    """

    tokens: int
    variants: int = 1
    share: float = 1.0
    hit_rate: float | None = None


def prefix_for_hit_rate(
    hit_rate: float, mean_input: float, *, tokens: int | None = None, share: float | None = None
) -> tuple[int, float]:
    """``(tokens, share)`` of a shared prefix whose prompt tokens are ``hit_rate`` of all prompt tokens, given the
    requests' own mean prompt length ``mean_input`` (the prefix comes on top of it): ``share·tokens / (mean_input +
    share·tokens) = hit_rate``. A warm prefix cache serves exactly those tokens, so this is the token hit rate a
    server with prefix caching reports once every variant has been seen (a cache works in whole blocks, so a
    prefix that is not a multiple of the block size hits slightly less).

    Give at most one of ``tokens`` (the share is solved) and ``share`` (the length is solved; default 1).

    Raises:
        ValueError: the solved share exceeds 1 (the prefix is too short for the rate), or both were given.
    """
    if tokens is not None and share is not None:
        raise ValueError("give tokens or share with hit_rate, not both (the other follows from the rate)")
    prefix_tokens = hit_rate * mean_input / (1 - hit_rate)  # share × tokens
    if tokens is None:
        s = 1.0 if share is None else share
        if s <= 0:
            raise ValueError("share must be > 0 to reach a hit rate")
        return max(1, round(prefix_tokens / s)), s
    s = prefix_tokens / tokens
    if s > 1:
        need = math.ceil(prefix_tokens)
        raise ValueError(
            f"a prefix of {tokens:,} tokens on every request gives at most {tokens / (mean_input + tokens):.0%} "
            f"(prompts average {mean_input:,.0f} tokens of their own); give tokens ≥ {need:,} or a lower hit_rate"
        )
    return tokens, round(s, 6)


@dataclass(frozen=True, slots=True)
class Stage:
    """One piece of the open-loop rate curve.

    Attributes:
        kind: ``rate`` (constant rate), ``ramp`` (linear from the previous rate, or ``ramp_from``, to ``rate``) or
            ``burst`` (``count`` requests at once at ``at_s``; bursts do not take time in the sequence).
        rate: requests/s (the target rate for a ramp).
        duration_s: length of a rate/ramp stage; None = until the run stops (last stage only).
        ramp_from: start rate of a ramp; None = the rate the previous stage ended at (0 for a first stage).
        count: burst size.
        at_s: burst time, seconds from the run start.
    """

    kind: str
    rate: float = 0.0
    duration_s: float | None = None
    ramp_from: float | None = None
    count: int = 0
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Arrival:
    """How load is offered.

    Attributes:
        mode: ``open`` (send at scheduled times) or ``closed`` (keep ``concurrency`` requests in flight).
        process: inter-arrival process for open loop: constant | poisson | gamma.
        burstiness: gamma shape (< 1 burstier than Poisson, 1 = Poisson, > 1 smoother).
        stages: the rate curve (open loop).
        concurrency: in-flight requests (closed loop).
        max_concurrency: open loop: at most this many requests in flight (a request due while all are taken waits;
            the wait is send lag, counted in its latencies).
    """

    mode: str = "open"
    process: str = "poisson"
    burstiness: float = 1.0
    stages: tuple[Stage, ...] = ()
    concurrency: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class Warmup:
    """Requests excluded from statistics (still sent and stored): the first ``requests`` ones, and every
    session/request that starts before ``duration_s``."""

    requests: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Stop:
    """When a run stops: after ``requests`` requests (warmup included) and/or ``duration_s`` seconds."""

    requests: int | None = None
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class MixedTarget:
    """Plain HTTP traffic sent beside the LLM load at its own rate (requests/s)."""

    name: str
    url: str
    rate: float
    method: str = "GET"
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Profile:
    """A complete, validated workload profile."""

    name: str
    classes: tuple[RequestClass, ...]
    arrival: Arrival
    stop: Stop = field(default_factory=Stop)
    warmup: Warmup = field(default_factory=Warmup)
    shared_prefix: SharedPrefix | None = None
    slos: tuple[Slo, ...] = ()
    mixed_traffic: tuple[MixedTarget, ...] = ()
    endpoint: str = "chat"
    model: str | None = None
    url: str | None = None
    seed: int | None = None
    same_prompts: bool = False  # the same prompt text as every other same-prompts run with this seed (warm on purpose)
    description: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class Overrides:
    """Command-line values that replace profile fields (``None`` = keep the file's value).

    ``rate`` replaces the whole rate curve with one constant-rate stage (bursts included) and switches to open
    loop; ``concurrency`` switches to closed loop, or, given with ``rate`` (or over an open-loop profile that has a
    cap already), sets the open loop's cap on requests in flight. ``input_tokens``/``output_tokens`` replace every
    class's lengths.
    ``duration_s``/``requests`` replace the matching ``stop`` field only.
    """

    rate: float | None = None
    concurrency: int | None = None
    process: str | None = None
    burstiness: float | None = None
    duration_s: float | None = None
    requests: int | None = None
    warmup: int | None = None
    input_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    model: str | None = None
    url: str | None = None
    seed: int | None = None
    slos: tuple[Slo, ...] | None = None


def apply_overrides(profile: Profile, ov: Overrides | None) -> Profile:
    """The profile with command-line values applied (CLI > file > defaults)."""
    if ov is None:
        return profile
    arrival = profile.arrival
    if ov.rate is not None:
        arrival = replace(arrival, mode="open", stages=(Stage("rate", ov.rate),), concurrency=None)
    if ov.concurrency is not None and arrival.mode == "open" and (ov.rate is not None or arrival.max_concurrency):
        arrival = replace(arrival, max_concurrency=ov.concurrency)  # the open loop's cap
    elif ov.concurrency is not None:
        arrival = replace(arrival, mode="closed", stages=(), concurrency=ov.concurrency, max_concurrency=None)
    if ov.process is not None:
        arrival = replace(arrival, process=ov.process)
    if ov.burstiness is not None:
        arrival = replace(arrival, burstiness=ov.burstiness)
    stop = profile.stop
    if ov.duration_s is not None:
        stop = replace(stop, duration_s=ov.duration_s)
    if ov.requests is not None:
        stop = replace(stop, requests=ov.requests)
    warmup = profile.warmup if ov.warmup is None else replace(profile.warmup, requests=ov.warmup)
    classes = profile.classes
    if ov.input_tokens is not None:
        classes = tuple(replace(c, input_tokens=ov.input_tokens) for c in classes)
    if ov.output_tokens is not None:
        classes = tuple(replace(c, output_tokens=ov.output_tokens) for c in classes)
    return replace(
        profile,
        arrival=arrival,
        stop=stop,
        warmup=warmup,
        classes=classes,
        model=ov.model if ov.model is not None else profile.model,
        url=ov.url if ov.url is not None else profile.url,
        seed=ov.seed if ov.seed is not None else profile.seed,
        slos=ov.slos if ov.slos is not None else profile.slos,
    )


def flag_overrides(pick: Callable[[str], Any], *, slos: tuple[Slo, ...] | None = None) -> Overrides:
    """The :class:`Overrides` from command-line flags; ``pick(name)`` is a flag's typed value or None when the flag
    was not given (so a flag left at its default never replaces a profile field)."""
    from tailscope.workload.lengths import parse_length_spec

    in_spec, out_spec = pick("input_tokens"), pick("output_tokens")
    return Overrides(
        rate=pick("rate"),
        concurrency=pick("concurrency"),
        process=pick("arrival"),
        burstiness=pick("burstiness"),
        duration_s=pick("duration"),
        requests=pick("requests"),
        warmup=pick("warmup"),
        input_tokens=parse_length_spec(in_spec, what="--input-tokens") if in_spec is not None else None,
        output_tokens=parse_length_spec(out_spec, what="--output-tokens") if out_spec is not None else None,
        model=pick("model"),
        url=pick("url"),
        seed=pick("seed"),
        slos=slos,
    )
