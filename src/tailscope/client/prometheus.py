"""A parser for the Prometheus text exposition format (pure)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tailscope.errors import TailscopeError

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class PrometheusParseError(TailscopeError):
    """The /metrics text is not valid exposition format."""


@dataclass(frozen=True, slots=True)
class PromSample:
    """One sample line: metric name, canonical labels text (sorted ``k="v"`` pairs joined by ``,``), value."""

    name: str
    labels: str
    value: float

    def label_dict(self) -> dict[str, str]:
        return {m.group(1): _unescape(m.group(2)) for m in _LABEL.finditer(self.labels)}


def _unescape(v: str) -> str:
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _parse_value(text: str, where: str) -> float:
    t = text.strip()
    if t in ("+Inf", "Inf"):
        return math.inf
    if t == "-Inf":
        return -math.inf
    if t == "NaN":
        return math.nan
    try:
        return float(t)
    except ValueError:
        raise PrometheusParseError(f"{where}: sample value {t!r} is not a number") from None


def parse_prometheus_text(text: str, *, source: str = "/metrics") -> list[PromSample]:
    """All samples of an exposition-format document (comments and TYPE/HELP lines skipped).

    Raises:
        PrometheusParseError: naming the source and line for a malformed line.
    """
    out: list[PromSample] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{lineno}"
        if "{" in line:
            name, _, rest = line.partition("{")
            body, sep, tail = rest.rpartition("}")
            if not sep:
                raise PrometheusParseError(f"{where}: unterminated label set")
            pairs = []
            pos = 0
            while pos < len(body):
                m = _LABEL.match(body, pos)
                if not m:
                    if body[pos:].strip(" ,"):
                        raise PrometheusParseError(f"{where}: malformed labels {body!r}")
                    break
                pairs.append((m.group(1), m.group(2)))
                pos = m.end()
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(pairs))
            value_part = tail.split()
        else:
            parts = line.split()
            name, labels, value_part = parts[0], "", parts[1:]
        name = name.strip()
        if not name or not value_part:
            raise PrometheusParseError(f"{where}: expected 'name{{labels}} value', got {raw[:80]!r}")
        out.append(PromSample(name=name, labels=labels, value=_parse_value(value_part[0], where)))
    return out
