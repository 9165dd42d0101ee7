"""Autoscale policy files (``--autoscale FILE``): YAML validated by pydantic, handed on as
:class:`~tailscope.engine.autoscaler.AutoscalePolicy`.

The fields and their meaning are in :mod:`tailscope.engine.autoscaler`. Unknown keys are errors; every error names
the file, the line and the field (``policy.yaml:3: max_replicas must be ≥ min_replicas (got 0)``).
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tailscope.engine.autoscaler import METRICS, AutoscalePolicy, FragmentationModel, ScaleRule, parse_conditions
from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._schema import one_of
from tailscope.io._yaml import line_of, validate_yaml_mapping

_DEFAULT = AutoscalePolicy()


class _RuleM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    up: str | None = None
    down: str | None = None
    rebuild: str | None = None
    for_s: float = Field(default=0.0, ge=0)
    step: int = Field(default=1, ge=1)


class _FragM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_share: float = Field(default=0.6, gt=0, le=0.9)
    tau_s: float = Field(default=3600.0, gt=0)


class _PolicyM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: Annotated[str, one_of(METRICS)] = _DEFAULT.metric
    target: float = Field(default=_DEFAULT.target, gt=0)
    min_replicas: int = Field(default=_DEFAULT.min_replicas, ge=0)
    max_replicas: int = Field(default=_DEFAULT.max_replicas, ge=1)
    scrape_interval_s: float = Field(default=_DEFAULT.scrape_interval_s, gt=0)
    scale_up_cooldown_s: float = Field(default=_DEFAULT.scale_up_cooldown_s, ge=0)
    scale_down_cooldown_s: float = Field(default=_DEFAULT.scale_down_cooldown_s, ge=0)
    provisioning_s: float = Field(default=_DEFAULT.provisioning_s, ge=0)
    load_gbps: float = Field(default=_DEFAULT.load_gbps, gt=0)
    engine_init_s: float = Field(default=_DEFAULT.engine_init_s, ge=0)
    window_s: float = Field(default=_DEFAULT.window_s, ge=0)
    rules: list[_RuleM] = Field(default_factory=list)
    cold_start_s: float | None = Field(default=None, ge=0)
    fragmentation: _FragM | None = None


def load_policy(path: str | os.PathLike[str]) -> AutoscalePolicy:
    """Read an autoscale policy YAML file.

    Raises:
        ConfigError: ``file:line: field what is wrong`` (or the file cannot be read, or is not UTF-8).
    """
    return parse_policy(read_user_text(path, what="autoscale policy"), source=str(path))


def parse_policy(text: str, *, source: str = "<autoscale policy>") -> AutoscalePolicy:
    """Validate autoscale policy YAML text.

    Raises:
        ConfigError: ``source:line: field what is wrong``.
    """
    m, root = validate_yaml_mapping(
        text,
        _PolicyM,
        source=source,
        error=ConfigError,
        shape="an autoscale policy is a mapping (metric, target, min_replicas, …)",
    )
    if m.max_replicas < m.min_replicas:
        raise ConfigError(
            f"{source}:{line_of(root, ('max_replicas',))}: max_replicas must be ≥ min_replicas "
            f"(got {m.max_replicas} < {m.min_replicas})"
        )
    rules = []
    for i, r in enumerate(m.rules):
        where = f"{source}:{line_of(root, ('rules', i))}: rules[{i}]"
        given = [(a, t) for a, t in (("up", r.up), ("down", r.down), ("rebuild", r.rebuild)) if t is not None]
        if len(given) != 1:
            raise ConfigError(
                f"{where}: give exactly one of up:, down: or rebuild: (a condition like 'ttft_p99 > 1000')"
            )
        action, text = given[0]
        rules.append(ScaleRule(action, parse_conditions(text, where=where), r.for_s, r.step))
    skip = ("rules", "cold_start", "fragmentation")
    plain = {f.name: getattr(m, f.name) for f in fields(AutoscalePolicy) if f.name not in skip}
    frag = FragmentationModel(m.fragmentation.max_share, m.fragmentation.tau_s) if m.fragmentation else None
    return AutoscalePolicy(**plain, rules=tuple(rules), cold_start=m.cold_start_s, fragmentation=frag).validate(source)
