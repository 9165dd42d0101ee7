"""The profile file schema: pydantic models at the file boundary (unknown keys forbidden).

Cross-field checks that belong to one mapping live here as model validators; their messages start with ``@field:``
when they are about one field of that mapping, so :mod:`tailscope.io.profile` can point at that key's line.
Checks that span the file (unique class names, empirical files, SLO grammar) happen during conversion.

Every number is bounded with the limits of the bench flags (``workload.simple``: rates, durations, request counts,
concurrency; ``workload.lengths``: token lengths): beyond them a value is a typo, refused with file:line and field
before any load; NaN and infinity are refused everywhere. Distributions are bounded during conversion, where it is
known whether they hold tokens, turns or seconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from tailscope.errors import ConfigError, ProfileError
from tailscope.units import parse_duration_s
from tailscope.workload.lengths import MAX_LENGTH_TOKENS, LengthDist, parse_length_spec
from tailscope.workload.simple import MAX_CONCURRENCY, MAX_DURATION_S, MAX_RATE, MAX_REQUESTS

#: the most prefix variants, and the largest gamma shape / class weight a profile accepts
MAX_VARIANTS = 1_000_000
MAX_BURSTINESS = 1000.0
MAX_WEIGHT = 1e9

_PARAMS = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std"),
    "lognormal": ("median", "sigma"),
    "exponential": ("mean",),
    "empirical": ("file",),
}
_ALL_PARAMS = ("value", "mean", "std", "median", "sigma", "file", "column")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DistM(_M):
    """A distribution: ``{dist: KIND, ...parameters, min?, max?}`` (min/max clamp every sample)."""

    dist: Literal["fixed", "uniform", "normal", "lognormal", "exponential", "empirical"]
    value: float | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    median: float | None = None
    sigma: float | None = None
    file: str | None = None
    column: str | None = None

    @model_validator(mode="after")
    def _check(self) -> DistM:
        need = _PARAMS[self.dist]
        for p in need:
            if getattr(self, p) is None:
                raise ValueError(f"@{p}: is required for dist {self.dist} (it takes {', '.join(need)})")
        for p in _ALL_PARAMS:
            if p == "column" and self.dist == "empirical":
                continue
            if p not in need and getattr(self, p) is not None:
                raise ValueError(f"@{p}: is not a parameter of dist {self.dist} (it takes {', '.join(need)})")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"@min: must be ≤ max (got {self.min:g} > {self.max:g})")
        for p in ("min", "max", "value", "mean", "median"):
            v = getattr(self, p)
            if v is not None and v < 0:
                raise ValueError(f"@{p}: must be ≥ 0 (got {v:g})")
        if self.dist in ("exponential", "lognormal") and (self.mean or self.median or 0) <= 0:
            key = "mean" if self.dist == "exponential" else "median"
            raise ValueError(f"@{key}: must be > 0 (got {getattr(self, key):g})")
        for p in ("std", "sigma"):
            v = getattr(self, p)
            if v is not None and v < 0:
                raise ValueError(f"@{p}: must be ≥ 0 (got {v:g})")
        return self


def _length_shorthand(v: Any) -> Any:
    """``80`` → fixed; ``"uniform:1:10"`` → the matching distribution; dicts pass through."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return {"dist": "fixed", "value": v}
    if isinstance(v, str):
        try:
            d = parse_length_spec(v, what="length")
        except ProfileError as exc:
            raise ValueError(str(exc).removeprefix("length: ")) from None
        return _dist_to_dict(d)
    return v


def _time_shorthand(v: Any) -> Any:
    """``3`` or ``"1.5s"`` → fixed seconds; dicts pass through."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return {"dist": "fixed", "value": float(v)}
    if isinstance(v, str):
        try:
            return {"dist": "fixed", "value": parse_duration_s(v, what="time")}
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("time: ")) from None
    return v


def _dist_to_dict(d: LengthDist) -> dict[str, Any]:
    names = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "std")}
    names |= {"lognormal": ("median", "sigma"), "exponential": ("mean",)}
    out: dict[str, Any] = {"dist": d.kind}
    for key, val in zip(names[d.kind], (d.a, d.b), strict=False):
        out[key] = val
    if d.kind != "uniform":
        if d.lo > 1:
            out["min"] = d.lo
        if d.hi is not None:
            out["max"] = d.hi
    return out


LengthField = Annotated[DistM, BeforeValidator(_length_shorthand)]
TimeField = Annotated[DistM, BeforeValidator(_time_shorthand)]


class SessionM(_M):
    turns: LengthField
    think_time_s: TimeField = Field(default_factory=lambda: DistM(dist="fixed", value=0.0))


def _ms_shorthand(v: Any) -> Any:
    """``50`` → fixed milliseconds; ``"exponential:40"`` (the length-spec forms) → that distribution; dicts pass
    through."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return {"dist": "fixed", "value": float(v)}
    return _length_shorthand(v)


MsField = Annotated[DistM, BeforeValidator(_ms_shorthand)]


class StepM(_M):
    """One agent step: a model call, or a sub-agent (``steps``)."""

    name: str = Field(min_length=1)
    input_tokens: LengthField | None = None
    output_tokens: LengthField | None = None
    fan_out: LengthField | None = None
    gap_ms: MsField | None = None
    repeat: LengthField | None = None
    use_answers: bool = False
    prompt_template: str | None = Field(default=None, min_length=1)
    steps: list[StepM] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if "/" in v:
            raise ValueError("must not contain '/' (it joins a sub-agent's name to its steps' names)")
        return v

    @model_validator(mode="after")
    def _check(self) -> StepM:
        if self.steps is not None and not self.steps:
            raise ValueError("@steps: a sub-agent lists at least one step")
        if self.steps is not None and self.use_answers:
            raise ValueError("@use_answers: goes on the sub-agent's own steps (the calls that read the answers)")
        if self.steps is not None and self.prompt_template is not None:
            raise ValueError("@prompt_template: goes on the sub-agent's own steps (the calls that read the answers)")
        if self.prompt_template is not None and not self.use_answers:
            raise ValueError(
                "@prompt_template: places the answers of the calls the step waits for; add use_answers: true"
            )
        return self


class AgentM(_M):
    steps: list[StepM] = Field(min_length=1)


class ClassM(_M):
    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT)
    input_tokens: LengthField | None = None
    output_tokens: LengthField | None = None
    session: SessionM | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    model: str | None = Field(default=None, min_length=1)
    priority: int = 0
    agent: AgentM | None = None
    dataset: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_shape(self) -> ClassM:
        if self.agent is not None and self.session is not None:
            raise ValueError("@agent: a class is a multi-turn session or an agent, not both (drop session)")
        if self.dataset is not None:
            for shape in ("session", "agent", "input_tokens"):
                if getattr(self, shape) is not None:
                    raise ValueError(
                        f"@{shape}: a class with a dataset sends the dataset's prompts, one per arrival (drop {shape})"
                    )
            return self
        for length in ("input_tokens", "output_tokens"):
            if getattr(self, length) is None:
                raise ValueError(f"@{length}: is required (or give the class a dataset: FORMAT:PATH)")
        return self

    @field_validator("extra_body")
    @classmethod
    def _extra_body(cls, v: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted({"stream", "model"} & set(v))
        if reserved:
            raise ValueError(f"{reserved[0]!r} is set by tailscope (the profile's model; streams are always on)")
        return v


class SharedPrefixM(_M):
    tokens: int | None = Field(default=None, ge=1, le=MAX_LENGTH_TOKENS)
    variants: int = Field(default=1, ge=1, le=MAX_VARIANTS)
    share: float | None = Field(default=None, ge=0, le=1)
    hit_rate: float | None = Field(default=None, gt=0, lt=1)


class StageM(_M):
    rate: float | None = Field(default=None, ge=0, le=MAX_RATE)
    ramp_to: float | None = Field(default=None, ge=0, le=MAX_RATE)
    ramp_from: float | None = Field(default=None, ge=0, le=MAX_RATE)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    burst: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    at_s: float | None = Field(default=None, ge=0, le=MAX_DURATION_S)

    @model_validator(mode="after")
    def _check(self) -> StageM:
        kinds = [k for k in ("rate", "ramp_to", "burst") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "must have exactly one of rate, ramp_to or burst "
                f"(got {', '.join(kinds) or 'none'}; e.g. {{rate: 2, duration_s: 30}})"
            )
        if self.burst is not None:
            if self.at_s is None:
                raise ValueError("@at_s: is required for a burst (seconds from the run start)")
            if self.duration_s is not None:
                raise ValueError("@duration_s: a burst takes no time; give at_s only")
        elif self.at_s is not None:
            raise ValueError("@at_s: only a burst stage takes at_s")
        if self.ramp_from is not None and self.ramp_to is None:
            raise ValueError("@ramp_from: only a ramp stage (ramp_to) takes ramp_from")
        return self


class ArrivalM(_M):
    mode: Literal["open", "closed"] = "open"
    process: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0, le=MAX_BURSTINESS)
    rate: float | None = Field(default=None, gt=0, le=MAX_RATE)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    stages: list[StageM] | None = None

    @model_validator(mode="after")
    def _check(self) -> ArrivalM:
        if self.mode == "closed":
            if self.concurrency is None:
                raise ValueError("@concurrency: is required in closed mode (requests kept in flight)")
            if self.rate is not None or self.stages is not None or self.max_concurrency is not None:
                key = "rate" if self.rate is not None else "stages" if self.stages is not None else "max_concurrency"
                raise ValueError(f"@{key}: closed mode takes arrival.concurrency only; rates shape open loop")
        else:
            if self.concurrency is not None:
                raise ValueError(
                    "@concurrency: open mode takes rate or stages (and max_concurrency, a cap on requests in "
                    "flight); use mode: closed for concurrency"
                )
            if (self.rate is None) == (self.stages is None):
                raise ValueError("open mode needs exactly one of rate or stages (e.g. rate: 5)")
            if self.stages is not None and not self.stages:
                raise ValueError("@stages: must list at least one stage")
        return self


class WarmupM(_M):
    requests: int = Field(default=0, ge=0, le=MAX_REQUESTS)
    duration_s: float = Field(default=0.0, ge=0, le=MAX_DURATION_S)


class StopM(_M):
    requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)


class MixedM(_M):
    name: str = Field(min_length=1)
    url: str
    rate: float = Field(gt=0, le=MAX_RATE)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    body: str | dict[str, Any] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, le=86_400.0)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https:// (got {v!r})")
        return v


class ProfileM(_M):
    name: str = Field(min_length=1)
    description: str = ""
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = None
    url: str | None = None
    seed: int | None = None
    same_prompts: bool = False
    classes: list[ClassM] = Field(min_length=1)
    shared_prefix: SharedPrefixM | None = None
    arrival: ArrivalM
    warmup: WarmupM = Field(default_factory=WarmupM)
    stop: StopM = Field(default_factory=StopM)
    slo: dict[str, str | float] = Field(default_factory=dict)
    mixed_traffic: list[MixedM] = Field(default_factory=list)
