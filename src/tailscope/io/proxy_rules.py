"""Fault rules of ``tailscope proxy``: YAML files, JSON bodies of the admin API and command-line flags, validated into
:class:`ProxyRule`.

A rule (every field but ``name`` optional; ``share`` is the share of requests — of connections in TCP mode — it
applies to, drawn per request)::

    name: slow-llm
    share: 1.0
    path: /v1/                     # HTTP: only requests whose path starts with this
    latency: {dist: lognormal, median_ms: 200, p95_ms: 600}   # before the request is forwarded (upstream direction)
    latency_down: {dist: uniform, min_ms: 10, max_ms: 50}     # before the response's first byte
    error: {status: 503}           # HTTP: answer this status instead of forwarding
    reset: {after_bytes: 300}      # close the connection after this many response bytes
    stall: {after_bytes: 300, ms: 2000}   # pause the response once, mid-stream
    bandwidth_kbps: 64             # throttle the response to this many kilobytes/s
    blackhole: true                # accept and never answer

A file holds ``rules: [..]``; every error names ``file:line: field``.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._schema import nested_problem
from tailscope.io._yaml import validate_yaml_mapping

_Z95 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class Latency:
    """A delay distribution in ms: ``fixed`` (``ms``), ``uniform`` (``min_ms``–``max_ms``) or ``lognormal``
    (``median_ms``, ``p95_ms``)."""

    dist: str = "fixed"
    ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0
    median_ms: float = 0.0
    p95_ms: float = 0.0

    def sample_s(self, rng: random.Random) -> float:
        """One delay in seconds."""
        if self.dist == "uniform":
            return rng.uniform(self.min_ms, self.max_ms) / 1e3
        if self.dist == "lognormal":
            if self.median_ms <= 0:
                return 0.0
            sigma = math.log(max(self.p95_ms, self.median_ms) / self.median_ms) / _Z95
            return self.median_ms * math.exp(rng.gauss(0.0, sigma)) / 1e3 if sigma > 0 else self.median_ms / 1e3
        return self.ms / 1e3

    def mean_ms(self) -> float:
        if self.dist == "uniform":
            return (self.min_ms + self.max_ms) / 2
        if self.dist == "lognormal":
            sigma = math.log(max(self.p95_ms, self.median_ms) / self.median_ms) / _Z95 if self.median_ms > 0 else 0.0
            return self.median_ms * math.exp(sigma * sigma / 2)
        return self.ms


@dataclass(frozen=True, slots=True)
class ProxyRule:
    """One fault rule (see the module's docstring for the fields)."""

    name: str = "rule"
    share: float = 1.0
    path: str | None = None
    latency: Latency | None = None
    latency_down: Latency | None = None
    error_status: int | None = None
    reset_after_bytes: int | None = None
    stall_after_bytes: int | None = None
    stall_ms: float = 0.0
    bandwidth_kbps: float | None = None
    blackhole: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The rule in the file/JSON shape (what ``GET /rules`` returns)."""
        out: dict[str, Any] = {"name": self.name, "share": self.share}
        if self.path is not None:
            out["path"] = self.path
        for key, lat in (("latency", self.latency), ("latency_down", self.latency_down)):
            if lat is not None:
                d = asdict(lat)
                keep = {"fixed": ("ms",), "uniform": ("min_ms", "max_ms"), "lognormal": ("median_ms", "p95_ms")}
                out[key] = {"dist": lat.dist} | {k: d[k] for k in keep[lat.dist]}
        if self.error_status is not None:
            out["error"] = {"status": self.error_status}
        if self.reset_after_bytes is not None:
            out["reset"] = {"after_bytes": self.reset_after_bytes}
        if self.stall_after_bytes is not None:
            out["stall"] = {"after_bytes": self.stall_after_bytes, "ms": self.stall_ms}
        if self.bandwidth_kbps is not None:
            out["bandwidth_kbps"] = self.bandwidth_kbps
        if self.blackhole:
            out["blackhole"] = True
        return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _LatencyM(_Strict):
    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    ms: float | None = Field(default=None, ge=0)
    min_ms: float | None = Field(default=None, ge=0)
    max_ms: float | None = Field(default=None, ge=0)
    median_ms: float | None = Field(default=None, gt=0)
    p95_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _fields_of_dist(self) -> _LatencyM:
        need = {"fixed": ("ms",), "uniform": ("min_ms", "max_ms"), "lognormal": ("median_ms", "p95_ms")}[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.dist} latency needs {' and '.join(need)}")
        if self.dist == "uniform" and (self.max_ms or 0) < (self.min_ms or 0):
            raise ValueError("max_ms must be ≥ min_ms")
        if self.dist == "lognormal" and (self.p95_ms or 0) < (self.median_ms or 0):
            raise ValueError("p95_ms must be ≥ median_ms")
        return self

    def build(self) -> Latency:
        return Latency(
            self.dist,
            ms=self.ms or 0.0,
            min_ms=self.min_ms or 0.0,
            max_ms=self.max_ms or 0.0,
            median_ms=self.median_ms or 0.0,
            p95_ms=self.p95_ms or 0.0,
        )


class _ErrorM(_Strict):
    status: int = Field(ge=400, le=599)


class _ResetM(_Strict):
    after_bytes: int = Field(default=0, ge=0)


class _StallM(_Strict):
    after_bytes: int = Field(default=0, ge=0)
    ms: float = Field(gt=0)


class RuleModel(_Strict):
    """A rule as it enters (file, admin API body)."""

    name: str = Field(default="rule", min_length=1)
    share: float = Field(default=1.0, ge=0, le=1)
    path: str | None = None
    latency: _LatencyM | None = None
    latency_down: _LatencyM | None = None
    error: _ErrorM | None = None
    reset: _ResetM | None = None
    stall: _StallM | None = None
    bandwidth_kbps: float | None = Field(default=None, gt=0)
    blackhole: bool = False

    def build(self) -> ProxyRule:
        return ProxyRule(
            name=self.name,
            share=self.share,
            path=self.path,
            latency=self.latency.build() if self.latency else None,
            latency_down=self.latency_down.build() if self.latency_down else None,
            error_status=self.error.status if self.error else None,
            reset_after_bytes=self.reset.after_bytes if self.reset else None,
            stall_after_bytes=self.stall.after_bytes if self.stall else None,
            stall_ms=self.stall.ms if self.stall else 0.0,
            bandwidth_kbps=self.bandwidth_kbps,
            blackhole=self.blackhole,
        )


class _FileM(_Strict):
    rules: list[RuleModel]


def _problem(exc: ValidationError, model: type[BaseModel]) -> tuple[tuple[Any, ...], str]:
    _e, loc, what = nested_problem(exc, model, see="docs/drills.md for a rule's fields")
    return loc, what


def rule_from_dict(data: Any, *, source: str = "rule") -> ProxyRule:
    """Validate one rule given as a dict (an admin API body, a drill's ``fault.rule``).

    Raises:
        ConfigError: ``source: field what is wrong``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a rule is a mapping (name, latency, error, reset, stall, …)")
    try:
        return RuleModel.model_validate(dict(data)).build()
    except ValidationError as exc:
        _loc, what = _problem(exc, RuleModel)
        raise ConfigError(f"{source}: {what}") from None


def rules_from_json(data: Any, *, source: str = "body") -> list[ProxyRule]:
    """A rule, a list of rules or ``{"rules": [...]}`` (the admin API's ``POST``/``PUT /rules`` bodies)."""
    if isinstance(data, Mapping) and "rules" in data and len(data) == 1:
        data = data["rules"]
    items = data if isinstance(data, list) else [data]
    return [rule_from_dict(d, source=f"{source}[{i}]" if len(items) > 1 else source) for i, d in enumerate(items)]


def load_rules(path: str | os.PathLike[str]) -> list[ProxyRule]:
    """Read a rules file (``rules: [...]``).

    Raises:
        ConfigError: ``file:line: field what is wrong``.
    """
    return parse_rules(read_user_text(path, what="proxy rules"), source=str(path))


def parse_rules(text: str, *, source: str = "<rules>") -> list[ProxyRule]:
    """Validate rules YAML text (``rules: [...]``)."""
    m, _root = validate_yaml_mapping(
        text,
        _FileM,
        source=source,
        error=ConfigError,
        shape="a rules file is a mapping with 'rules: [...]'",
        problem=_problem,
    )
    return [r.build() for r in m.rules]


def parse_latency(text: str, *, flag: str = "--latency") -> Latency:
    """``200`` (fixed, ms), ``uniform:100-300`` or ``lognormal:200,600`` (median, p95) from a flag.

    Raises:
        ConfigError: naming the flag and the accepted forms.
    """
    forms = f"{flag} takes 200 (ms), uniform:100-300 or lognormal:MEDIAN,P95 (got {text!r})"
    kind, _, rest = text.partition(":")
    try:
        if not rest:
            ms = float(kind.removesuffix("ms"))
            if ms < 0:
                raise ValueError
            return Latency("fixed", ms=ms)
        if kind == "uniform":
            lo, hi = (float(x) for x in rest.split("-"))
            if lo < 0 or hi < lo:
                raise ValueError
            return Latency("uniform", min_ms=lo, max_ms=hi)
        if kind == "lognormal":
            med, p95 = (float(x) for x in rest.split(","))
            if med <= 0 or p95 < med:
                raise ValueError
            return Latency("lognormal", median_ms=med, p95_ms=p95)
    except ValueError:
        raise ConfigError(forms) from None
    raise ConfigError(forms)


def _share(text: str, flag: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"{flag}: the share must be a number in [0, 1] (got {text!r})") from None
    if not 0 <= v <= 1:
        raise ConfigError(f"{flag}: the share must be in [0, 1] (got {text!r})")
    return v


def _int(text: str, flag: str, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"{flag}: {what} must be a whole number (got {text!r})") from None
    if v < 0:
        raise ConfigError(f"{flag}: {what} must be ≥ 0 (got {text!r})")
    return v


def rules_from_flags(
    *,
    latency: str | None = None,
    latency_down: str | None = None,
    error: str | None = None,
    reset: str | None = None,
    stall: str | None = None,
    bandwidth_kbps: float | None = None,
    blackhole: bool = False,
) -> list[ProxyRule]:
    """The rules of ``tailscope proxy``'s flags, one per flag.

    ``--error 503[:SHARE]``, ``--reset SHARE[:AFTER_BYTES]``, ``--stall MS[:AFTER_BYTES]``; latencies as
    :func:`parse_latency`.

    Raises:
        ConfigError: naming the flag.
    """
    rules: list[ProxyRule] = []
    if latency:
        rules.append(ProxyRule("latency", latency=parse_latency(latency)))
    if latency_down:
        rules.append(ProxyRule("latency-down", latency_down=parse_latency(latency_down, flag="--latency-down")))
    if error:
        status, _, share = error.partition(":")
        code = _int(status, "--error", "the status")
        if not 400 <= code <= 599:
            raise ConfigError(f"--error: the status must be 400–599 (got {status!r})")
        rules.append(ProxyRule("error", share=_share(share, "--error") if share else 1.0, error_status=code))
    if reset:
        share, _, after = reset.partition(":")
        rules.append(
            ProxyRule(
                "reset",
                share=_share(share, "--reset"),
                reset_after_bytes=_int(after, "--reset", "after_bytes") if after else 0,
            )
        )
    if stall:
        ms, _, after = stall.partition(":")
        try:
            stall_ms = float(ms)
        except ValueError:
            raise ConfigError(f"--stall takes MS[:AFTER_BYTES] (got {stall!r})") from None
        if stall_ms <= 0:
            raise ConfigError(f"--stall: the pause must be > 0 ms (got {stall!r})")
        rules.append(
            ProxyRule(
                "stall",
                stall_after_bytes=_int(after, "--stall", "after_bytes") if after else 0,
                stall_ms=stall_ms,
            )
        )
    if bandwidth_kbps is not None:
        if bandwidth_kbps <= 0:
            raise ConfigError(f"--bandwidth must be > 0 kB/s (got {bandwidth_kbps:g})")
        rules.append(ProxyRule("bandwidth", bandwidth_kbps=bandwidth_kbps))
    if blackhole:
        rules.append(ProxyRule("blackhole", blackhole=True))
    return rules


def check_rules_for_mode(rules: Sequence[ProxyRule], mode: str) -> None:
    """TCP mode has no HTTP statuses or paths.

    Raises:
        ConfigError: a rule that needs HTTP in TCP mode.
    """
    if mode == "tcp":
        for r in rules:
            if r.error_status is not None or r.path is not None:
                raise ConfigError(f"rule {r.name!r}: error statuses and paths need --mode http (the proxy is in tcp)")
