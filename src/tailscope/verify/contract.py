"""Performance contracts: the SLOs of a service and of its dependencies, and the regression rules of its CI gate.

A contract is a YAML file::

    name: chat-service
    slo:
      - {metric: ttft_ms, percentile: p99, max: 1500}
      - {metric: e2e_ms, percentile: p99, max: 20000, class: long_context}
      - {metric: error_rate, max: 0.01}
      - {metric: goodput_rps, min: 5}
    layers:
      - {layer: retrieval, percentile: p99.9, max_ms: 200}
    regression:
      baseline: latest:main
      max_increase: {ttft_ms.p99: 10%, output_tokens_per_s: -5%}
      confidence: 0.95

The file is parsed with ``yaml.safe_load`` and validated by pydantic at this boundary only; the rest of the gate works
on the frozen dataclasses below. Every validation error names ``file:line: field`` (lines come from the YAML node marks)
and unknown keys are errors, so a typo cannot silently disable a check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tailscope.errors import ContractError
from tailscope.metrics.percentiles import normalize_percentile_name, percentile_fraction

#: Latency metrics (milliseconds); each needs a percentile.
LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: Run-level rates; no percentile.
RATE_METRICS: tuple[str, ...] = (
    "error_rate",
    "goodput_rps",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "requests_per_s",
)
#: Metrics where a larger value is better (a regression is a decrease).
HIGHER_IS_BETTER: frozenset[str] = frozenset(
    {"goodput_rps", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s"}
)
METRICS: tuple[str, ...] = LATENCY_METRICS + RATE_METRICS


def canonical_percentile(name: str) -> str:
    """``p99.9`` → ``p999``, ``P95`` → ``p95``, ``median`` → ``p50``; raises ValueError for unknown names."""
    n = normalize_percentile_name(name)
    if n in ("mean", "max"):
        return n
    percentile_fraction(n)  # validates
    return n


def percentile_label(name: str) -> str:
    """Display form: ``p999`` → ``p99.9``."""
    return "p99.9" if name == "p999" else name


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One objective: ``metric`` (at ``percentile`` for latencies) must be ≤ ``max`` and/or ≥ ``min``.

    Latencies are in ms; ``error_rate`` is a fraction (0.01 = 1 %); the other rates are per second.
    ``request_class`` restricts the check to one request class (``None`` = all requests).
    """

    metric: str
    percentile: str | None = None
    max: float | None = None
    min: float | None = None
    request_class: str | None = None
    line: int = 0

    @property
    def name(self) -> str:
        """Stable check name, e.g. ``ttft_ms.p99`` or ``e2e_ms.p99[long_context]``."""
        base = self.metric if self.percentile is None else f"{self.metric}.{percentile_label(self.percentile)}"
        return base if self.request_class is None else f"{base}[{self.request_class}]"


@dataclass(frozen=True, slots=True)
class LayerCheck:
    """A dependency contract on a trace set: the ``layer``'s span duration at ``percentile`` must be ≤ ``max_ms``."""

    layer: str
    percentile: str
    max_ms: float
    line: int = 0

    @property
    def name(self) -> str:
        return f"layer {self.layer}.{percentile_label(self.percentile)}"


@dataclass(frozen=True, slots=True)
class RegressionLimit:
    """How much worse ``metric`` (at ``percentile``) may get against the baseline.

    ``relative`` limits are fractions (0.10 = +10 %); absolute ones are in the metric's unit. ``error_rate`` limits
    are always absolute: ``1%`` there means one percentage point (0.01), because the relative change of a rate that
    is usually 0 is undefined. For higher-is-better metrics the limit is the largest allowed *decrease* (``-5%`` and
    ``5%`` both mean "may drop by at most 5 %").
    """

    metric: str
    percentile: str | None
    limit: float
    relative: bool
    line: int = 0

    @property
    def key(self) -> str:
        return self.metric if self.percentile is None else f"{self.metric}.{percentile_label(self.percentile)}"

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def describe(self) -> str:
        sign = "-" if self.higher_is_better else "+"
        if self.relative:
            return f"{sign}{abs(self.limit) * 100:g}%"
        return f"{sign}{abs(self.limit):g}"


@dataclass(frozen=True, slots=True)
class Regression:
    """Regression rules: baseline reference, per-metric limits, confidence, bootstrap settings."""

    baseline: str | None
    limits: tuple[RegressionLimit, ...]
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Contract:
    """A validated performance contract."""

    name: str
    slos: tuple[SloCheck, ...] = ()
    layers: tuple[LayerCheck, ...] = ()
    regression: Regression | None = None
    description: str = ""
    source: str = "<contract>"


# -- the file boundary (pydantic) -----------------------------------------------------------------------------------

_Metric = Literal[
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "error_rate",
    "goodput_rps",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "requests_per_s",
]


def _check_percentile(v: str | float | None) -> str | None:
    if v is None:
        return None
    text = f"p{v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else str(v)
    try:
        return canonical_percentile(text)
    except ValueError:
        raise ValueError(f"unknown percentile {v!r}: use p50, p90, p95, p99, p99.9, mean or max") from None


class _SloModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=False)

    metric: _Metric
    percentile: str | None = None
    max: float | None = None
    min: float | None = None
    request_class: str | None = Field(default=None, alias="class")

    _pct = field_validator("percentile", mode="before")(_check_percentile)

    @model_validator(mode="after")
    def _consistent(self) -> _SloModel:
        if self.max is None and self.min is None:
            raise ValueError("give a limit: max (or min for throughput metrics)")
        if self.metric in LATENCY_METRICS and self.percentile is None:
            raise ValueError(f"{self.metric} needs a percentile (e.g. percentile: p99)")
        if self.metric in RATE_METRICS and self.percentile is not None:
            raise ValueError(f"{self.metric} is a rate over the run; remove 'percentile'")
        return self


class _LayerModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layer: str = Field(min_length=1)
    percentile: str = "p99"
    max_ms: float = Field(gt=0)

    _pct = field_validator("percentile", mode="before")(_check_percentile)


_LIMIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+)\s*(%?)\s*$")


class _RegressionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline: str | None = None
    max_increase: dict[str, str | float] = Field(default_factory=dict)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    resamples: int = Field(default=2000, ge=100, le=100_000)
    seed: int = 0

    @field_validator("max_increase")
    @classmethod
    def _limits(cls, v: dict[str, str | float]) -> dict[str, str | float]:
        for key, limit in v.items():
            _parse_key(key)
            _parse_limit(key, limit)
        return v


class _ContractModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    slo: list[_SloModel] = Field(default_factory=list)
    layers: list[_LayerModel] = Field(default_factory=list)
    regression: _RegressionModel | None = None


def _parse_key(key: str) -> tuple[str, str | None]:
    metric, _, pct = key.partition(".")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} in {key!r}; use one of {', '.join(METRICS)}")
    if metric in LATENCY_METRICS:
        if not pct:
            raise ValueError(f"{key!r}: latency metrics need a percentile, e.g. {metric}.p99")
        try:
            return metric, canonical_percentile(pct)
        except ValueError:
            raise ValueError(f"{key!r}: unknown percentile {pct!r}; use p50, p90, p95, p99, p99.9, mean") from None
    if pct:
        raise ValueError(f"{key!r}: {metric} is a rate over the run; write just {metric!r}")
    return metric, None


def _parse_limit(key: str, limit: str | float) -> tuple[float, bool]:
    if isinstance(limit, bool):
        raise ValueError(f"{key}: expected a limit like 10% or 50 (got {limit!r})")
    if isinstance(limit, int | float):
        return float(limit), False
    m = _LIMIT.match(limit)
    if not m:
        raise ValueError(f"{key}: expected a limit like 10%, -5% or an absolute number (got {limit!r})")
    value = float(m.group(1))
    return (value / 100.0, True) if m.group(2) else (value, False)


# -- YAML line numbers ------------------------------------------------------------------------------------------------


def _line_of(root: yaml.Node | None, loc: Sequence[int | str]) -> int:
    """1-based line of the deepest YAML node on ``loc`` (a pydantic error location)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    # an unknown key is reported on the key itself; a bad value on the value
                    line = key_node.start_mark.line + 1
                    nxt = value_node
                    break
            if nxt is None:
                return line
            node = nxt
            line = node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _field_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


def parse_contract(text: str, source: str = "<contract>") -> Contract:
    """Validate contract YAML text.

    Args:
        text: the YAML document.
        source: the file name used in error messages.

    Raises:
        ContractError: ``source:line: field: what is wrong`` for the first problem found (all problems are listed).
    """
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise ContractError(f"{source}:{line}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ContractError(f"{source}:1: a contract is a mapping with at least 'name' (got {type(data).__name__})")
    try:
        model = _ContractModel.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal[")))]
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key (allowed: {_allowed_keys(loc)})"
            lines.append(f"{source}:{_line_of(root, loc)}: {_field_path(loc)}: {msg}")
        raise ContractError("; ".join(lines)) from None
    return _to_contract(model, root, source)


def _allowed_keys(loc: Sequence[int | str]) -> str:
    parents: Mapping[str, type[BaseModel]] = {
        "slo": _SloModel,
        "layers": _LayerModel,
        "regression": _RegressionModel,
    }
    model: type[BaseModel] = _ContractModel
    if loc and isinstance(loc[0], str) and loc[0] in parents and len(loc) > 1:
        model = parents[loc[0]]
    return ", ".join(f.alias or name for name, f in model.model_fields.items())


def _to_contract(model: _ContractModel, root: yaml.Node | None, source: str) -> Contract:
    slos = tuple(
        SloCheck(
            metric=s.metric,
            percentile=s.percentile,
            max=s.max,
            min=s.min,
            request_class=s.request_class,
            line=_line_of(root, ["slo", i]),
        )
        for i, s in enumerate(model.slo)
    )
    layers = tuple(
        LayerCheck(layer=lay.layer, percentile=lay.percentile, max_ms=lay.max_ms, line=_line_of(root, ["layers", i]))
        for i, lay in enumerate(model.layers)
    )
    regression = None
    if model.regression is not None:
        r = model.regression
        limits = []
        for key, raw in r.max_increase.items():
            metric, pct = _parse_key(key)
            value, relative = _parse_limit(key, raw)
            if metric == "error_rate":
                relative = False  # "1%" of a fraction is one percentage point
            limits.append(
                RegressionLimit(
                    metric=metric,
                    percentile=pct,
                    limit=value,
                    relative=relative,
                    line=_line_of(root, ["regression", "max_increase", key]),
                )
            )
        regression = Regression(
            baseline=r.baseline, limits=tuple(limits), confidence=r.confidence, resamples=r.resamples, seed=r.seed
        )
    return Contract(
        name=model.name,
        slos=slos,
        layers=layers,
        regression=regression,
        description=model.description,
        source=source,
    )


def contract_to_dict(contract: Contract) -> dict[str, Any]:
    """The YAML-ready form of a contract (what :func:`parse_contract` reads back)."""
    out: dict[str, Any] = {"name": contract.name}
    if contract.description:
        out["description"] = contract.description
    slo_rows: list[dict[str, Any]] = []
    for s in contract.slos:
        row: dict[str, Any] = {"metric": s.metric}
        if s.percentile is not None:
            row["percentile"] = percentile_label(s.percentile)
        if s.max is not None:
            row["max"] = s.max
        if s.min is not None:
            row["min"] = s.min
        if s.request_class is not None:
            row["class"] = s.request_class
        slo_rows.append(row)
    if slo_rows:
        out["slo"] = slo_rows
    if contract.layers:
        out["layers"] = [
            {"layer": lay.layer, "percentile": percentile_label(lay.percentile), "max_ms": lay.max_ms}
            for lay in contract.layers
        ]
    if contract.regression is not None:
        r = contract.regression
        limits: dict[str, str | float] = {}
        for lim in r.limits:
            limits[lim.key] = f"{lim.limit * 100:g}%" if lim.relative or lim.metric == "error_rate" else lim.limit
        reg: dict[str, Any] = {"max_increase": limits, "confidence": r.confidence}
        if r.baseline is not None:
            reg = {"baseline": r.baseline, **reg}
        if r.resamples != 2000:
            reg["resamples"] = r.resamples
        if r.seed:
            reg["seed"] = r.seed
        out["regression"] = reg
    return out


def dump_contract(contract: Contract) -> str:
    """Contract as YAML text (flow style per check, like the documented format)."""
    return yaml.safe_dump(contract_to_dict(contract), sort_keys=False, default_flow_style=None, width=120)
