"""Drill files (``tailscope drill DRILL.yaml``): YAML validated by pydantic into a
:class:`~tailscope.verify.drill.DrillSpec`. Unknown keys are errors; every error names ``file:line: field``::

    name: llm-down
    target: {url: "http://127.0.0.1:8080", endpoint: chat}
    load: {rate: 4, duration_s: 20, output_tokens: 32}
    fault: {at_s: 5, for_s: 8, kind: llm-down}
    expect: {error_rate_max: 0.01, e2e_p95_max_ms: 2000, recovered_within_s: 5}

A proxy fault: ``fault: {at_s: 5, for_s: 8, kind: proxy, proxy: "http://127.0.0.1:9001", rule: {latency: …}}``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._schema import nested_problem, record_from
from tailscope.io._yaml import line_of, parse_yaml_mapping
from tailscope.io.proxy_rules import RuleModel
from tailscope.verify.drill import APP_FAULTS, PROXY_KIND, DrillExpect, DrillFault, DrillLoad, DrillSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _TargetM(_Strict):
    url: str = Field(min_length=1)
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = None

    @model_validator(mode="after")
    def _http(self) -> _TargetM:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {self.url!r})")
        return self


class _LoadM(_Strict):
    duration_s: float = Field(gt=0)
    rate: float | None = Field(default=None, gt=0)
    concurrency: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    input_tokens: int | None = Field(default=None, ge=1)
    profile: str | None = None

    @model_validator(mode="after")
    def _one_load(self) -> _LoadM:
        if self.profile is None and self.rate is None and self.concurrency is None:
            raise ValueError("needs rate (requests/s), concurrency or a profile")
        if self.rate is not None and self.concurrency is not None:
            raise ValueError("give rate or concurrency, not both")
        return self


class _FaultM(_Strict):
    at_s: float = Field(ge=0)
    for_s: float = Field(gt=0)
    kind: str
    admin: str | None = None
    proxy: str | None = None
    rule: RuleModel | None = None

    @model_validator(mode="after")
    def _kind(self) -> _FaultM:
        kinds = (*APP_FAULTS, PROXY_KIND)
        if self.kind not in kinds:
            raise ValueError(f"kind must be one of {', '.join(kinds)} (got {self.kind!r})")
        if self.kind == PROXY_KIND and (self.proxy is None or self.rule is None):
            raise ValueError("a proxy fault needs proxy (the proxy's admin URL) and rule")
        if self.kind != PROXY_KIND and (self.proxy is not None or self.rule is not None):
            raise ValueError(f"proxy and rule belong to kind: proxy (this fault is {self.kind!r})")
        return self


class _ExpectM(_Strict):
    error_rate_max: float | None = Field(default=None, ge=0, le=1)
    e2e_p95_max_ms: float | None = Field(default=None, gt=0)
    ttft_p95_max_ms: float | None = Field(default=None, gt=0)
    recovered_within_s: float | None = Field(default=None, ge=0)
    fallback_min: int | None = Field(default=None, ge=0)
    scope: Literal["all", "during"] = "all"


class _RecoveryM(_Strict):
    step_s: float = Field(default=1.0, gt=0)
    p95_tolerance: float = Field(default=0.5, ge=0)
    error_tolerance: float = Field(default=0.01, ge=0, le=1)


class _DrillM(_Strict):
    name: str = Field(min_length=1)
    target: _TargetM
    load: _LoadM
    fault: _FaultM
    expect: _ExpectM = Field(default_factory=_ExpectM)
    recovery: _RecoveryM = Field(default_factory=_RecoveryM)

    @model_validator(mode="after")
    def _fits(self) -> _DrillM:
        if self.fault.at_s + self.fault.for_s > self.load.duration_s:
            raise ValueError(
                f"the fault ends at {self.fault.at_s + self.fault.for_s:g} s, after the load "
                f"({self.load.duration_s:g} s): lengthen load.duration_s so the drill sees the recovery"
            )
        return self


def load_drill(path: str | os.PathLike[str]) -> DrillSpec:
    """Read and validate a drill file (a relative ``load.profile`` is resolved against the file's folder).

    Raises:
        ConfigError: ``file:line: field what is wrong`` (or the file cannot be read).
    """
    spec = parse_drill(read_user_text(path, what="drill"), source=str(path))
    if spec.load.profile is not None and not os.path.isabs(spec.load.profile):
        from dataclasses import replace

        resolved = str(Path(path).parent / spec.load.profile)
        spec = replace(spec, load=replace(spec.load, profile=resolved))
    return spec


def parse_drill(text: str, *, source: str = "<drill>") -> DrillSpec:
    """Validate drill YAML text.

    Raises:
        ConfigError: ``source:line: field what is wrong``.
    """
    data, root = parse_yaml_mapping(
        text, source=source, error=ConfigError, shape="a drill is a mapping (name, target, load, fault, expect)"
    )
    return drill_from_dict(data, source=source, root=root)


def drill_from_dict(data: dict[str, Any], *, source: str = "<drill>", root: Any = None) -> DrillSpec:
    """Validate a drill given as a dict of the file's shape.

    Raises:
        ConfigError: ``source:line: field what is wrong``.
    """
    try:
        m = _DrillM.model_validate(data)
    except ValidationError as exc:
        e, loc, what = nested_problem(exc, _DrillM, see="docs/drills.md")
        if e["type"] == "value_error" and not loc:
            what = str(e["msg"]).removeprefix("Value error, ")
            loc = ("load", "duration_s")
        raise ConfigError(f"{source}:{line_of(root, loc)}: {what}") from None
    f, ld, ex, rc = m.fault, m.load, m.expect, m.recovery
    return DrillSpec(
        name=m.name,
        url=m.target.url.rstrip("/"),
        endpoint=m.target.endpoint,
        model=m.target.model,
        load=record_from(DrillLoad, ld),
        fault=DrillFault(
            at_s=f.at_s,
            for_s=f.for_s,
            kind=f.kind,
            admin=f.admin.rstrip("/") if f.admin else None,
            proxy=f.proxy.rstrip("/") if f.proxy else None,
            rule=f.rule.build().to_dict() if f.rule is not None else {},
        ),
        expect=record_from(DrillExpect, ex),
        step_s=rc.step_s,
        p95_tolerance=rc.p95_tolerance,
        error_tolerance=rc.error_tolerance,
        source=source,
    )
