"""Workload profile files (YAML): pydantic at the file boundary (:mod:`tailscope.io.profile_schema`), converted to
the pure model in :mod:`tailscope.workload.profile`.

Every problem becomes one :class:`~tailscope.errors.ProfileError` that names the file, the line, the field path and
what is allowed, e.g. ``profile.yaml:14: classes[1].input_tokens.min must be ≤ max (got 3000 > 1000)``. Unknown keys
are errors. Line numbers come from the YAML node tree (``yaml.compose``), walked along pydantic's error location.
The format is documented in ``docs/workload.md``.
"""

from __future__ import annotations

import json
import os
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from tailscope.errors import ConfigError, ProfileError, TailscopeError
from tailscope.files import read_user_text
from tailscope.io._schema import record_from
from tailscope.io._yaml import field_path, line_of, parse_yaml_mapping
from tailscope.io.lengths import read_lengths
from tailscope.io.profile_schema import AgentM, ArrivalM, ClassM, DistM, MixedM, ProfileM, StepM
from tailscope.metrics.slo import parse_slo
from tailscope.workload import profile as m
from tailscope.workload.agent import AgentGraph, AgentStep, max_calls, most_waited_for
from tailscope.workload.answer_template import parse_template
from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import MAX_LENGTH_TOKENS, LengthDist, empirical
from tailscope.workload.simple import MAX_DURATION_S

#: the most turns a session may have, and the largest lognormal sigma (beyond it samples overflow): typos beyond
MAX_TURNS = 10_000
MAX_SIGMA = 10.0
#: the most calls one agent session may have (fan-outs × repeats × sub-agents at their max)
MAX_AGENT_CALLS = 10_000


def load_profile(path: str | os.PathLike[str]) -> m.Profile:
    """Read, validate and convert a profile file.

    Raises:
        ProfileError: ``file:line: field.path message (got …)`` for any problem.
    """
    p = Path(path)
    text = read_user_text(p, what="profile", error=ProfileError)
    return parse_profile(text, source=str(path), base_dir=p.parent)


def parse_profile(text: str, *, source: str = "<profile>", base_dir: Path | None = None) -> m.Profile:
    """Validate profile YAML text. ``base_dir`` resolves relative ``empirical`` files (default: current folder)."""
    data, root = parse_yaml_mapping(
        text,
        source=source,
        error=ProfileError,
        shape="a profile is a YAML mapping with name, classes, arrival, … (see docs/workload.md)",
    )
    try:
        pm = ProfileM.model_validate(data)
    except ValidationError as exc:
        raise _to_profile_error(exc, root, source) from None
    return _Converter(pm, root, source, base_dir or Path.cwd()).profile()


def _loc_path(loc: tuple[int | str, ...]) -> str:
    return field_path(loc) or "profile"


def _unwrap_model(tp: Any) -> type[BaseModel] | None:
    origin = typing.get_origin(tp)
    if origin is None:
        return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
    if origin in (list, typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(tp):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    cls: type[BaseModel] | None = ProfileM
    for part in loc:
        if isinstance(part, int) or cls is None:
            continue
        f = cls.model_fields.get(part)
        if f is None:
            return None
        cls = _unwrap_model(f.annotation)
    return cls


def _to_profile_error(exc: ValidationError, root: yaml.Node | None, source: str) -> ProfileError:
    msgs = [_format_error(e, root, source) for e in exc.errors(include_url=False)]
    text = msgs[0]
    if len(msgs) > 1:
        text += f" (and {len(msgs) - 1} more problem{'s' if len(msgs) > 2 else ''}; fix this one first)"
    err = ProfileError(text)
    err.args = (text,)
    return err


def _format_error(e: Any, root: yaml.Node | None, source: str) -> str:
    loc: tuple[int | str, ...] = tuple(e["loc"])
    msg: str = e["msg"]
    kind: str = e["type"]
    inp = e.get("input")
    if msg.startswith("Value error, "):
        msg = msg.removeprefix("Value error, ")
    if msg.startswith("@"):
        field, _, rest = msg[1:].partition(": ")
        loc, msg = (*loc, field), rest
    elif kind == "missing":
        msg = "is required"
    elif kind == "less_than_equal":
        le = e.get("ctx", {}).get("le")
        msg = f"is above the largest accepted value {_num(le) if isinstance(le, int | float) else le}; check the number"
    elif kind == "finite_number":
        msg = "must be a finite number"
    elif kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent is not None else "see docs/workload.md"
        msg = f"is not a known field (allowed: {allowed})"
    elif msg.startswith("Input should be"):
        msg = msg.replace("Input should be", "must be", 1)
    elif msg.startswith("Value should"):
        msg = msg.replace("Value should", "must", 1)
    got = ""
    if kind not in ("missing", "extra_forbidden") and "(got" not in msg and not isinstance(inp, dict | list):
        got = f" (got {inp!r})"
    return f"{source}:{line_of(root, loc)}: {_loc_path(loc)} {msg}{got}"


def _num(v: float) -> str:
    """A bound or value for a message: ``10,000,000`` (not ``1e+07``), ``0.5``."""
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e18 else f"{v:,g}"


class _Converter:
    """Validated pydantic tree → pure dataclasses, with checks that span fields (file:line on each)."""

    def __init__(self, pm: ProfileM, root: yaml.Node | None, source: str, base_dir: Path) -> None:
        self.pm, self.root, self.source, self.base_dir = pm, root, source, base_dir

    def fail(self, loc: tuple[int | str, ...], msg: str) -> ProfileError:
        return ProfileError(f"{self.source}:{line_of(self.root, loc)}: {_loc_path(loc)} {msg}")

    def profile(self) -> m.Profile:
        pm = self.pm
        names = [c.name for c in pm.classes]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise self.fail(("classes", i, "name"), f"must be unique (got {name!r} twice)")
        slos = []
        for key, value in pm.slo.items():
            try:
                slos.append(parse_slo(f"{key}={value}"))
            except ConfigError as exc:
                raise self.fail(("slo", key), str(exc).split(": ", 1)[-1]) from None
        return m.Profile(
            name=pm.name,
            description=pm.description,
            endpoint=pm.endpoint,
            model=pm.model,
            url=pm.url,
            seed=pm.seed,
            same_prompts=pm.same_prompts,
            classes=tuple(self.request_class(i, c) for i, c in enumerate(pm.classes)),
            shared_prefix=self.shared_prefix() if pm.shared_prefix else None,
            arrival=self.arrival(pm.arrival),
            warmup=m.Warmup(pm.warmup.requests, pm.warmup.duration_s),
            stop=m.Stop(pm.stop.requests, pm.stop.duration_s),
            slos=tuple(slos),
            mixed_traffic=tuple(self.mixed(t) for t in pm.mixed_traffic),
            source=self.source,
        )

    def shared_prefix(self) -> m.SharedPrefix:
        """The shared prefix; with ``hit_rate`` its length (or share) solved from the classes' mean prompt length."""
        sp = self.pm.shared_prefix
        assert sp is not None
        if sp.hit_rate is None:
            if sp.tokens is None:
                raise self.fail(("shared_prefix", "tokens"), "is required (or give hit_rate: the length follows)")
            return m.SharedPrefix(sp.tokens, sp.variants, 1.0 if sp.share is None else sp.share)
        classes = [self.request_class(i, c) for i, c in enumerate(self.pm.classes)]
        total = sum(c.weight for c in classes) or 1.0
        mean_input = sum(c.weight * c.input_tokens.mean() for c in classes) / total
        try:
            tokens, share = m.prefix_for_hit_rate(sp.hit_rate, mean_input, tokens=sp.tokens, share=sp.share)
        except ValueError as exc:
            raise self.fail(("shared_prefix", "hit_rate"), str(exc)) from None
        if tokens > MAX_LENGTH_TOKENS:
            raise self.fail(
                ("shared_prefix", "hit_rate"),
                f"needs a prefix of {tokens:,} tokens (above {MAX_LENGTH_TOKENS:,}); give a lower hit_rate or a share",
            )
        return m.SharedPrefix(tokens, sp.variants, share, hit_rate=sp.hit_rate)

    def request_class(self, i: int, c: ClassM) -> m.RequestClass:
        loc: tuple[int | str, ...] = ("classes", i)
        session = None
        if c.session is not None:
            session = m.SessionShape(
                turns=self.length(c.session.turns, (*loc, "session", "turns"), bound=MAX_TURNS, unit="turns"),
                think_time_s=self.time(c.session.think_time_s, (*loc, "session", "think_time_s")),
            )
        output = self.length(c.output_tokens, (*loc, "output_tokens")) if c.output_tokens is not None else None
        dataset = self.dataset(c.dataset, output is not None, (*loc, "dataset")) if c.dataset is not None else None
        if dataset is not None:
            inputs = empirical([d.input_tokens for d in dataset.prompts])
            outs = [d.output_tokens for d in dataset.prompts if d.output_tokens is not None]
            output = output or empirical(outs)
        else:
            assert c.input_tokens is not None
            inputs = self.length(c.input_tokens, (*loc, "input_tokens"))
        assert output is not None
        return m.RequestClass(
            name=c.name,
            weight=c.weight,
            input_tokens=inputs,
            output_tokens=output,
            dataset=dataset,
            session=session,
            extra_body=dict(c.extra_body),
            model=c.model,
            priority=c.priority,
            agent=self.agent(c.agent, (*loc, "agent")) if c.agent is not None else None,
        )

    def dataset(self, ref: str, class_output: bool, loc: tuple[int | str, ...]) -> m.ClassDataset:
        """A class's dataset, read now (relative paths from the profile's folder); its rows' lengths estimated at
        about four characters a token. A bad file or row is one line naming the profile field and the row."""
        from tailscope.io.datasets import approx_tokens, parse_dataset_ref, read_dataset
        from tailscope.workload.datasets import DEFAULT_OUTPUT_TOKENS

        try:
            fmt, column, path = parse_dataset_ref(ref)
            if not path.is_absolute():
                path = self.base_dir / path
            data = read_dataset(f"{fmt}:{column + ':' if column else ''}{path}")
        except TailscopeError as exc:
            raise self.fail(loc, str(exc)) from None
        prompts = []
        for r in data.rows:
            out = r.max_tokens
            if out is None and not class_output:
                out = approx_tokens(r.reference) if r.reference else DEFAULT_OUTPUT_TOKENS
            prompts.append(m.DatasetPrompt(r.prompt, r.messages, approx_tokens(r.text()), out))
        if not prompts:
            raise self.fail(loc, f"{ref}: no usable row (a prompt or messages)")
        return m.ClassDataset(ref, tuple(prompts))

    def agent(self, a: AgentM, loc: tuple[int | str, ...]) -> AgentGraph:
        self.unique_steps(a.steps, loc)
        graph = AgentGraph(tuple(self.step(s, (*loc, "steps", k)) for k, s in enumerate(a.steps)))
        self.templates(a.steps, most_waited_for(graph), "", loc)
        most = max_calls(graph)
        if most is None or most > MAX_AGENT_CALLS:
            got = "unbounded" if most is None else f"up to {most:,}"
            raise self.fail(
                loc,
                f"a session may have at most {MAX_AGENT_CALLS:,} calls (got {got}); give fan_out and repeat "
                "distributions a max",
            )
        return graph

    def templates(
        self, steps: list[StepM], waited: dict[str, int | None], prefix: str, loc: tuple[int | str, ...]
    ) -> None:
        """Refuse a ``prompt_template`` naming an answer its step can never have."""
        for k, s in enumerate(steps):
            at = (*loc, "steps", k)
            if s.steps:
                self.templates(s.steps, waited, prefix + s.name + "/", at)
                continue
            if s.prompt_template is None:
                continue
            most = waited.get(prefix + s.name)
            want = parse_template(s.prompt_template).highest_answer
            if most == 0:
                raise self.fail(
                    (*at, "prompt_template"), "the session's first step waits for no call: it has no answers to place"
                )
            if most is not None and want > most:
                raise self.fail(
                    (*at, "prompt_template"),
                    f"{{{{answer_{want}}}}}: the step waits for at most {most} call{'s' if most != 1 else ''} "
                    f"(answers 1..{most})",
                )

    def unique_steps(self, steps: list[StepM], loc: tuple[int | str, ...]) -> None:
        names = [c.name for c in steps]
        for k, name in enumerate(names):
            if name in names[:k]:
                raise self.fail((*loc, "steps", k, "name"), f"must be unique among its steps (got {name!r} twice)")

    def step(self, s: StepM, loc: tuple[int | str, ...]) -> AgentStep:
        def opt_len(d: DistM | None, key: str, bound: float = MAX_LENGTH_TOKENS, unit: str = "tokens") -> Any:
            return self.length(d, (*loc, key), bound=bound, unit=unit) if d is not None else None

        steps = s.steps or []
        self.unique_steps(steps, loc)
        return AgentStep(
            name=s.name,
            input_tokens=opt_len(s.input_tokens, "input_tokens"),
            output_tokens=opt_len(s.output_tokens, "output_tokens"),
            fan_out=opt_len(s.fan_out, "fan_out", MAX_AGENT_CALLS, "calls"),
            gap_ms=self.time(s.gap_ms, (*loc, "gap_ms"), bound=MAX_DURATION_S * 1000, unit="ms") if s.gap_ms else None,
            repeat=opt_len(s.repeat, "repeat", MAX_AGENT_CALLS, "runs"),
            use_answers=s.use_answers,
            prompt_template=self.template(s.prompt_template, (*loc, "prompt_template")),
            steps=tuple(self.step(c, (*loc, "steps", k)) for k, c in enumerate(steps)),
            where=self.where((*loc, "prompt_template")) if s.prompt_template is not None else None,
        )

    def where(self, loc: tuple[int | str, ...]) -> str:
        """``file:line: field.path`` of a field, for checks made after parsing (the served context)."""
        return f"{self.source}:{line_of(self.root, loc)}: {_loc_path(loc)}"

    def template(self, text: str | None, loc: tuple[int | str, ...]) -> str | None:
        if text is not None:
            try:
                parse_template(text)
            except ValueError as exc:
                raise self.fail(loc, str(exc)) from None
        return text

    def bounded(self, d: DistM, loc: tuple[int | str, ...], bound: float, unit: str) -> None:
        """Refuse a distribution parameter beyond ``bound`` (a typo), naming file:line and the parameter."""
        for key in ("value", "min", "max", "mean", "median", "std"):
            v = getattr(d, key)
            if v is not None and v > bound:
                raise self.fail(
                    (*loc, key), f"{_num(v)} {unit} is above the largest accepted value {_num(bound)}; check the number"
                )
        if d.sigma is not None and d.sigma > MAX_SIGMA:
            raise self.fail((*loc, "sigma"), f"{d.sigma:g} is above the largest accepted lognormal sigma {MAX_SIGMA:g}")

    def length(
        self, d: DistM, loc: tuple[int | str, ...], *, bound: float = MAX_LENGTH_TOKENS, unit: str = "tokens"
    ) -> LengthDist:
        self.bounded(d, loc, bound, unit)
        lo = max(1, int(d.min)) if d.min is not None else 1
        hi = int(d.max) if d.max is not None else None
        if d.dist == "fixed":
            assert d.value is not None
            if d.value < 1:
                raise self.fail((*loc, "value"), f"must be ≥ 1 {unit.removesuffix('s')} (got {d.value:g})")
            return LengthDist("fixed", float(round(d.value)), lo=lo, hi=hi)
        if d.dist == "uniform":
            assert d.min is not None
            assert d.max is not None
            if d.min < 1:
                raise self.fail((*loc, "min"), f"must be ≥ 1 {unit.removesuffix('s')} (got {d.min:g})")
            return LengthDist("uniform", float(int(d.min)), float(int(d.max)), lo=lo, hi=hi)
        if d.dist == "empirical":
            values = self.empirical(d, loc)
            if values and max(values) > bound:
                raise self.fail(
                    (*loc, "file"), f"holds {max(values):,} {unit}, above the largest accepted value {_num(bound)}"
                )
            return LengthDist("empirical", lo=lo, hi=hi, values=values)
        a = d.mean if d.dist in ("normal", "exponential") else d.median
        b = d.std if d.dist == "normal" else (d.sigma if d.dist == "lognormal" else 0.0)
        assert a is not None
        assert b is not None
        if d.dist == "normal" and a <= 0:
            raise self.fail((*loc, "mean"), f"must be > 0 (got {a:g})")
        return LengthDist(d.dist, float(a), float(b), lo=lo, hi=hi)

    def time(
        self, d: DistM, loc: tuple[int | str, ...], *, bound: float = MAX_DURATION_S, unit: str = "s"
    ) -> FloatDist:
        self.bounded(d, loc, bound, unit)
        if d.dist == "empirical":
            raise self.fail((*loc, "dist"), "must be fixed, uniform, normal, lognormal or exponential for a time")
        lo = d.min or 0.0
        if d.dist == "fixed":
            return FloatDist("fixed", d.value or 0.0, lo=lo, hi=d.max)
        if d.dist == "uniform":
            assert d.min is not None
            assert d.max is not None
            return FloatDist("uniform", d.min, d.max, lo=lo, hi=d.max)
        a = d.mean if d.dist in ("normal", "exponential") else d.median
        b = d.std if d.dist == "normal" else (d.sigma if d.dist == "lognormal" else 0.0)
        assert a is not None
        assert b is not None
        return FloatDist(d.dist, a, b, lo=lo, hi=d.max)

    def empirical(self, d: DistM, loc: tuple[int | str, ...]) -> tuple[int, ...]:
        assert d.file is not None
        path = Path(d.file)
        if not path.is_absolute():
            path = self.base_dir / path
        if not path.is_file():
            raise self.fail(
                (*loc, "file"), f"no such file {d.file!r} (looked at {path}; paths are relative to the profile)"
            )
        try:
            values = read_lengths(path, column=d.column)
        except ProfileError as exc:
            raise self.fail((*loc, "file"), f"is unusable: {exc}") from None
        return values

    def arrival(self, a: ArrivalM) -> m.Arrival:
        if a.mode == "closed":
            return m.Arrival(mode="closed", process=a.process, burstiness=a.burstiness, concurrency=a.concurrency)
        stages: list[m.Stage] = []
        if a.rate is not None:
            stages.append(m.Stage("rate", a.rate))
        for i, s in enumerate(a.stages or []):
            if s.burst is not None:
                stages.append(m.Stage("burst", count=s.burst, at_s=s.at_s or 0.0))
            elif s.ramp_to is not None:
                stages.append(m.Stage("ramp", s.ramp_to, s.duration_s, ramp_from=s.ramp_from))
            else:
                assert s.rate is not None
                stages.append(m.Stage("rate", s.rate, s.duration_s))
            timed = [j for j, st in enumerate(a.stages or []) if st.burst is None]
            if s.burst is None and s.duration_s is None and i != timed[-1]:
                raise self.fail(("arrival", "stages", i), "needs duration_s (only the last timed stage may omit it)")
        return m.Arrival(
            mode="open",
            process=a.process,
            burstiness=a.burstiness,
            stages=tuple(stages),
            max_concurrency=a.max_concurrency,
        )

    def mixed(self, t: MixedM) -> m.MixedTarget:
        body = json.dumps(t.body) if isinstance(t.body, dict) else t.body
        return record_from(m.MixedTarget, t, body=body, headers=tuple(sorted(t.headers.items())))
