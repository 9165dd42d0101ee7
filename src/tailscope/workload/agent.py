"""Agentic sessions: a profile class's agent call graph, drawn from distributions into the calls of one session.

An agent is a sequence of steps. Each step runs once (or ``repeat`` times in a row: a ReAct loop) and each run of it
fans out to ``fan_out`` parallel calls (1 by default); the next step joins: its calls wait for every call the step
before it ended with. A step is either one model call (its prompt and output lengths drawn per call) or a sub-agent
(``steps``: a nested sequence, run as a child of the session; fanned out, each branch is a whole sub-agent). Before a
step's calls go out, the tool that ran between the steps takes ``gap_ms`` (drawn per call, after the latest of the
calls it waits for). A step with ``use_answers`` has the text of those calls' answers placed into its prompt when it is
sent (the runner builds that prompt at dispatch time, from the answers received): after its own text, or where its
``prompt_template`` says (:mod:`tailscope.workload.answer_template`).

Pure: a seeded ``random.Random`` in, :class:`AgentCall`\\ s out (the load generator's call graph: ``RequestSpec.after``
and ``RequestSpec.answers_from``). Same graph, same seed → the same shapes, gaps and lengths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import LengthDist

_NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One step of an agent.

    Attributes:
        name: the step's name (sub-agent steps are named ``parent/child`` in records and metrics).
        input_tokens: prompt tokens per call (None = the class's ``input_tokens``); with ``use_answers`` the
            predecessors' answers come on top.
        output_tokens: ``max_tokens`` per call (None = the class's ``output_tokens``).
        fan_out: parallel calls (or sub-agent branches) per run of the step; None = 1.
        gap_ms: the tool-call gap in milliseconds before each call of the step, after the latest end of the calls it
            waits for; None = 0. A sub-agent's gap comes before its first step (on top of that step's own gap).
        repeat: runs of the step in a row (each waits for the previous one); None = 1.
        use_answers: put the text of the answers of the calls this step waits for into its prompt.
        prompt_template: where the answers go (``{{answers}}``, ``{{answer_N}}``, ``{{prompt}}``); None = after the
            step's own text. Only with ``use_answers``.
        steps: a sub-agent's own steps (then ``input_tokens``/``output_tokens`` are its steps' defaults).
        where: where the step's ``prompt_template`` is written (``file:line: field.path``, from a profile file), for
            the context check's message; None otherwise. Not part of the step's identity (equality ignores it).
    """

    name: str
    input_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    fan_out: LengthDist | None = None
    gap_ms: FloatDist | None = None
    repeat: LengthDist | None = None
    use_answers: bool = False
    prompt_template: str | None = None
    steps: tuple[AgentStep, ...] = ()
    where: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AgentGraph:
    """A class's agent: its steps in order."""

    steps: tuple[AgentStep, ...]


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One model call of a drawn session, in dispatch (topological) order.

    Attributes:
        step: the step's path name (``research/search``).
        deps: ``(index of an earlier call of the session, gap ns)``: due ``gap`` after the latest of their ends.
            Empty for the session's first calls.
        answers_from: indexes of earlier calls whose answers go into this call's prompt.
        prompt_template: where they go (the step's ``prompt_template``), or None.
    """

    step: str
    input_tokens: int
    output_tokens: int
    deps: tuple[tuple[int, int], ...] = ()
    answers_from: tuple[int, ...] = ()
    prompt_template: str | None = None


def draw_session(
    graph: AgentGraph, rng: random.Random, *, input_tokens: LengthDist, output_tokens: LengthDist
) -> list[AgentCall]:
    """One session's calls drawn from ``graph`` (fan-outs, repeats, gaps and lengths, in that order per step).

    Args:
        input_tokens, output_tokens: the defaults of steps that give none (the class's lengths).
    """
    calls: list[AgentCall] = []
    _expand(graph.steps, [], 0, "", calls, rng, input_tokens, output_tokens)
    return calls


def _expand(
    steps: tuple[AgentStep, ...],
    preds: list[int],
    entry_gap_ns: int,
    prefix: str,
    calls: list[AgentCall],
    rng: random.Random,
    d_in: LengthDist,
    d_out: LengthDist,
) -> list[int]:
    """Append the calls of ``steps`` run after ``preds``; returns the calls the next step waits for."""
    for k, step in enumerate(steps):
        extra = entry_gap_ns if k == 0 else 0
        name = prefix + step.name
        runs = step.repeat.sample(rng) if step.repeat is not None else 1
        for _ in range(runs):
            width = step.fan_out.sample(rng) if step.fan_out is not None else 1
            ends: list[int] = []
            for _ in range(width):
                gap = extra + (round(step.gap_ms.sample(rng) * _NS_PER_MS) if step.gap_ms is not None else 0)
                if step.steps:
                    s_in = step.input_tokens or d_in
                    s_out = step.output_tokens or d_out
                    ends += _expand(step.steps, preds, gap, name + "/", calls, rng, s_in, s_out)
                    continue
                n_in = (step.input_tokens or d_in).sample(rng)
                n_out = (step.output_tokens or d_out).sample(rng)
                calls.append(
                    AgentCall(
                        step=name,
                        input_tokens=n_in,
                        output_tokens=n_out,
                        deps=tuple((p, gap) for p in preds),
                        answers_from=tuple(preds) if step.use_answers else (),
                        prompt_template=step.prompt_template if step.use_answers else None,
                    )
                )
                ends.append(len(calls) - 1)
            preds = ends
            extra = 0
    return preds


@dataclass(frozen=True, slots=True)
class StepLengths:
    """A model-call step's lengths, for checks against the served context.

    Attributes:
        name: the step's path name (``react/think``).
        input_tokens, output_tokens: its lengths, defaults filled in (the answers a ``use_answers`` step reads come
            on top of ``input_tokens``).
        template: its ``prompt_template`` when it places answers with one (its literal text is sent on top), else
            None.
        where: where that template is written (:attr:`AgentStep.where`), or None.
    """

    name: str
    input_tokens: LengthDist
    output_tokens: LengthDist
    template: str | None = None
    where: str | None = None


def step_lengths(graph: AgentGraph, *, input_tokens: LengthDist, output_tokens: LengthDist) -> list[StepLengths]:
    """The lengths of every model-call step (defaults filled in) and its prompt template, for checks against the
    served context."""
    out: list[StepLengths] = []

    def walk(steps: tuple[AgentStep, ...], prefix: str, d_in: LengthDist, d_out: LengthDist) -> None:
        for s in steps:
            s_in, s_out = s.input_tokens or d_in, s.output_tokens or d_out
            if s.steps:
                walk(s.steps, prefix + s.name + "/", s_in, s_out)
            else:
                tmpl = s.prompt_template if s.use_answers else None
                out.append(StepLengths(prefix + s.name, s_in, s_out, tmpl, s.where if tmpl is not None else None))

    walk(graph.steps, "", input_tokens, output_tokens)
    return out


def most_waited_for(graph: AgentGraph) -> dict[str, int | None]:
    """Per model-call step (path name): the most calls one of its calls can wait for (the answers a
    ``use_answers`` step can read; 0 for the session's first step), None when unbounded."""
    out: dict[str, int | None] = {}

    def ends(s: AgentStep) -> int | None:
        """The most calls one run of ``s`` ends with."""
        inner = ends(s.steps[-1]) if s.steps else 1
        fan = _most(s.fan_out)
        return None if inner is None or fan is None else inner * fan

    def biggest(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else max(a, b)

    def walk(steps: tuple[AgentStep, ...], prefix: str, preds: int | None) -> None:
        for s in steps:
            mine = ends(s)
            # a repeated step's later runs wait for its own previous run
            entry = biggest(preds, mine) if _most(s.repeat) != 1 else preds
            if s.steps:
                walk(s.steps, prefix + s.name + "/", entry)
            else:
                out[prefix + s.name] = entry
            preds = mine

    walk(graph.steps, "", 0)
    return out


def max_calls(graph: AgentGraph) -> int | None:
    """The most calls one session can have, or None when a fan-out or repeat is unbounded."""
    return _bound(graph.steps)


def _most(d: LengthDist | None) -> int | None:
    return 1 if d is None else d.max_value()


def _bound(steps: tuple[AgentStep, ...]) -> int | None:
    total = 0
    for s in steps:
        inner = _bound(s.steps) if s.steps else 1
        fan, rep = _most(s.fan_out), _most(s.repeat)
        if inner is None or fan is None or rep is None:
            return None
        total += inner * fan * rep
    return total
