"""Contract files: read and validate a performance contract (YAML text, a file or a dict) into a
:class:`~tailscope.verify.contract.Contract`, and write one back.

This is the file boundary of the gate: YAML is parsed with ``yaml.safe_load`` and validated by pydantic here only; the
gate works on the frozen dataclasses. Every validation error names ``file:line: field`` (lines come from the YAML node
marks) and unknown keys are errors, so a typo cannot silently disable a check. The format is documented in
:mod:`tailscope.verify.contract` and docs/gates.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tailscope.errors import ContractError
from tailscope.files import read_user_text
from tailscope.io._schema import record_from
from tailscope.verify.contract import (
    LATENCY_METRICS,
    RATE_METRICS,
    RESOURCE_METRICS,
    Contract,
    LayerCheck,
    Regression,
    RegressionLimit,
    SloCheck,
    canonical_percentile,
    parse_limit,
    parse_limit_key,
    parse_size_mib,
    percentile_label,
)


def load_contract(path: str | os.PathLike[str]) -> Contract:
    """Read and validate a contract file.

    Raises:
        ContractError: the file cannot be read or is not UTF-8 (naming the path), or ``file:line: field: problem``.
    """
    return parse_contract(read_user_text(path, what="contract", error=ContractError), str(path))


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
    "gpu_memory_used_max",
    "gpu_memory_used_frac_max",
    "gpu_util_mean",
    "kv_usage_max",
    "energy_per_output_token_j",
]


def _check_limit(v: Any) -> Any:
    """A limit: a number, or a memory size (``8GiB``) turned into MiB (only ``gpu_memory_used_max`` has sizes)."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return parse_size_mib(v)
    return v


def _check_percentile(v: str | float | None) -> str | None:
    if v is None:
        return None
    text = f"p{v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else str(v)
    try:
        return canonical_percentile(text)
    except ValueError:
        raise ValueError(f"unknown percentile {v!r}: use p50, p90, p95, p99, p99.9, mean or max") from None


def _check_for(v: object) -> object:
    if v is not None and not (isinstance(v, str) and re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", v)):
        raise ValueError(f"for: {v!r}: expected a Prometheus duration like 30s, 2m or 1h")
    return v


class _SloModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=False)

    metric: _Metric
    percentile: str | None = None
    max: float | None = None
    min: float | None = None
    request_class: str | None = Field(default=None, alias="class")
    alert_for: str | None = Field(default=None, alias="for")
    severity: str | None = Field(default=None, min_length=1)

    _pct = field_validator("percentile", mode="before")(_check_percentile)
    _for = field_validator("alert_for", mode="before")(_check_for)
    _limit = field_validator("max", "min", mode="before")(_check_limit)

    @model_validator(mode="after")
    def _consistent(self) -> _SloModel:
        if self.max is None and self.min is None:
            raise ValueError("give a limit: max (or min for throughput metrics)")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no value can pass; swap or fix them")
        if self.metric in LATENCY_METRICS and self.percentile is None:
            raise ValueError(f"{self.metric} needs a percentile (e.g. percentile: p99)")
        if self.metric in RATE_METRICS and self.percentile is not None:
            raise ValueError(f"{self.metric} is a rate over the run; remove 'percentile'")
        if self.metric in RESOURCE_METRICS and self.percentile is not None:
            raise ValueError(f"{self.metric} is read from the run's scraped metrics; remove 'percentile'")
        if self.metric in RESOURCE_METRICS and self.request_class is not None:
            raise ValueError(f"{self.metric} is a whole-run figure; remove 'class'")
        return self


class _LayerModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    layer: str = Field(min_length=1)
    percentile: str = "p99"
    max_ms: float = Field(gt=0)
    alert_for: str | None = Field(default=None, alias="for")
    severity: str | None = Field(default=None, min_length=1)

    _pct = field_validator("percentile", mode="before")(_check_percentile)
    _for = field_validator("alert_for", mode="before")(_check_for)


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
            parse_limit_key(key)
            parse_limit(key, limit)
        return v


class _ContractModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    slo: list[_SloModel] = Field(default_factory=list)
    layers: list[_LayerModel] = Field(default_factory=list)
    regression: _RegressionModel | None = None


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


def _check_line(root: yaml.Node | None, loc: Sequence[int | str]) -> int:
    """The line that declared a check; 0 for a contract that did not come from a file."""
    return _line_of(root, loc) if root is not None else 0


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
    return _validate(data, root, source)


def contract_from_dict(data: Mapping[str, Any], source: str = "<contract>") -> Contract:
    """Validate a contract given as a dict of the file's shape (``{"name": …, "slo": [{"metric": …}, …]}``).

    Raises:
        ContractError: ``source: field: problem`` for every problem found.
    """
    if not isinstance(data, Mapping):
        raise ContractError(f"{source}: a contract is a mapping with at least 'name' (got {type(data).__name__})")
    return _validate(dict(data), None, source)


def _validate(data: dict[str, Any], root: yaml.Node | None, source: str) -> Contract:
    try:
        model = _ContractModel.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal[")))]
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key (allowed: {_allowed_keys(loc)})"
            where = f"{source}:{_line_of(root, loc)}" if root is not None else source
            lines.append(f"{where}: {_field_path(loc)}: {msg}")
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
    slos = tuple(record_from(SloCheck, s, line=_check_line(root, ["slo", i])) for i, s in enumerate(model.slo))
    layers = tuple(
        record_from(LayerCheck, lay, line=_check_line(root, ["layers", i])) for i, lay in enumerate(model.layers)
    )
    regression = None
    if model.regression is not None:
        r = model.regression
        limits = []
        for key, raw in r.max_increase.items():
            metric, pct = parse_limit_key(key)
            value, relative = parse_limit(key, raw)
            if metric == "error_rate":
                relative = False  # "1%" of a fraction is one percentage point
            limits.append(
                RegressionLimit(
                    metric=metric,
                    percentile=pct,
                    limit=value,
                    relative=relative,
                    line=_check_line(root, ["regression", "max_increase", key]),
                )
            )
        regression = record_from(Regression, r, limits=tuple(limits))
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
        pct = percentile_label(s.percentile) if s.percentile is not None else None
        keys = _set({"percentile": pct, "max": s.max, "min": s.min, "class": s.request_class})
        slo_rows.append({"metric": s.metric} | keys | _alert_keys(s))
    if slo_rows:
        out["slo"] = slo_rows
    if contract.layers:
        out["layers"] = [
            {"layer": lay.layer, "percentile": percentile_label(lay.percentile), "max_ms": lay.max_ms}
            | _alert_keys(lay)
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


def _alert_keys(check: SloCheck | LayerCheck) -> dict[str, Any]:
    return _set({"for": check.alert_for, "severity": check.severity})


def _set(keys: dict[str, Any]) -> dict[str, Any]:
    """The entries whose value is set: the file leaves an unset field out."""
    return {k: v for k, v in keys.items() if v is not None}


def dump_contract(contract: Contract) -> str:
    """Contract as YAML text (flow style per check, like the documented format)."""
    return yaml.safe_dump(contract_to_dict(contract), sort_keys=False, default_flow_style=None, width=120)
