"""Changes a what-if projects (:mod:`tailscope.trace.whatif` states what each does to a span), parsed from the flags'
values: ``set-duration "OP=30ms"``, ``scale "OP=0.6"``, ``parallel "A,B,C"``, ``parallel-children OP``,
``cache "OP=HIT_RATE:HIT_DURATION"``, ``remove OP``, ``cap-retries "OP=N"``, ``timeout "OP=3s[:FALLBACK]"``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

KINDS = ("set-duration", "scale", "parallel", "parallel-children", "cache", "remove", "cap-retries", "timeout")
_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "min": 60e9, "h": 3600e9, "d": 86400e9}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s|min|m|h|d)?\s*$")
_EXAMPLES = {
    "set-duration": '"OP=30ms"',
    "scale": '"OP=0.6"',
    "parallel": '"A,B,C"',
    "parallel-children": '"OP"',
    "cache": '"OP=0.4:2ms"',
    "remove": '"OP"',
    "cap-retries": '"OP=1"',
    "timeout": '"OP=3s" or "OP=3s:200ms"',
}


def parse_duration_ns(text: str) -> float:
    """``30ms``, ``3s``, ``1.5s``, ``200us``, ``500ns``, ``2m``, ``1h``, ``30d`` → ns; a bare number is milliseconds.

    Raises:
        ValueError: not a duration.
    """
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 30ms, 3s, 200us)")
    return float(m.group(1)) * _UNITS[m.group(2) or "ms"]


@dataclass(frozen=True, slots=True)
class Change:
    """One change to project.

    Attributes:
        kind: one of :data:`KINDS`.
        ops: the operations (span names or globs) it applies to.
        value: ns for set-duration and timeout, the factor for scale, the hit rate for cache, N for cap-retries.
        extra: ns: the hit duration for cache, the fallback duration for timeout.
        text: the flag's value as given.
    """

    kind: str
    ops: tuple[str, ...]
    value: float = 0.0
    extra: float = 0.0
    text: str = ""

    @property
    def flag(self) -> str:
        """The command-line flag that reproduces it, e.g. ``--scale "llm=0.6"``."""
        return f'--{self.kind} "{self.text}"'

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "operations": list(self.ops), "flag": self.flag}


def parse_change(kind: str, text: str) -> Change:
    """Parse one change flag's value (``kind`` is the flag's name without dashes, e.g. ``set-duration``).

    Raises:
        ValueError: naming the flag, the value and the expected form.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown change {kind!r}: use one of {', '.join(KINDS)}")
    where = f"--{kind} {text!r}"
    want = f"expected {_EXAMPLES[kind]}"
    raw = text.strip()
    if kind in ("parallel", "parallel-children", "remove"):
        ops = tuple(o.strip() for o in raw.split(",")) if kind == "parallel" else (raw,)
        if not all(ops):
            what = "operations, comma-separated" if kind == "parallel" else "an operation"
            raise ValueError(f"{where}: {want} ({what})")
        return Change(kind, ops, text=raw)
    op, sep, rhs = raw.rpartition("=")
    op = op.strip()
    if not sep or not op or not rhs.strip():
        raise ValueError(f"{where}: {want}")
    try:
        if kind == "set-duration":
            return Change(kind, (op,), parse_duration_ns(rhs), text=raw)
        if kind == "scale":
            factor = float(rhs)
            if not factor >= 0 or factor == float("inf"):
                raise ValueError("the factor must be ≥ 0")
            return Change(kind, (op,), factor, text=raw)
        if kind == "cap-retries":
            n = int(rhs)
            if n < 1:
                raise ValueError("N must be ≥ 1")
            return Change(kind, (op,), float(n), text=raw)
        if kind == "cache":
            rate_s, sep2, dur_s = rhs.partition(":")
            rate = float(rate_s.rstrip("%")) / (100.0 if rate_s.strip().endswith("%") else 1.0)
            if not sep2 or not 0.0 <= rate <= 1.0:
                raise ValueError("HIT_RATE must be within 0..1 and HIT_DURATION given")
            return Change(kind, (op,), rate, parse_duration_ns(dur_s), text=raw)
        limit_s, _, fallback_s = rhs.partition(":")
        limit = parse_duration_ns(limit_s)
        return Change(kind, (op,), limit, parse_duration_ns(fallback_s) if fallback_s.strip() else 0.0, text=raw)
    except ValueError as exc:
        raise ValueError(f"{where}: {want} ({exc})") from None


def matcher(patterns: Iterable[str]) -> Callable[[str], bool]:
    """A test of span names against operations (exact names, or globs with ``*``, ``?``, ``[…]``)."""
    exact = {p for p in patterns if not any(ch in p for ch in "*?[")}
    globs = [p for p in patterns if p not in exact]

    def match(name: str) -> bool:
        return name in exact or any(fnmatch.fnmatchcase(name, g) for g in globs)

    return match
