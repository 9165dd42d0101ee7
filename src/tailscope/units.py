"""Unit helpers: durations with units, sizes, and nanosecond conversions."""

from __future__ import annotations

import re

from tailscope.errors import ConfigError

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s|m|min|h)?\s*$")
_FACTORS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str | float | int, *, what: str = "duration", default_unit: str = "s") -> float:
    """Parse ``"1.5s"``, ``"60ms"``, ``"2m"`` or a bare number (in ``default_unit``) into seconds.

    Raises:
        ConfigError: naming ``what`` when the text is not a non-negative duration.
    """
    if isinstance(text, bool):
        raise ConfigError(f"{what}: expected a duration like 1.5s or 60ms (got {text!r})")
    if isinstance(text, int | float):
        value, unit = float(text), default_unit
    else:
        m = _DURATION.match(text)
        if not m:
            raise ConfigError(f"{what}: expected a duration like 1.5s, 60ms or 2m (got {text!r})")
        value, unit = float(m.group(1)), m.group(2) or default_unit
    if value < 0:
        raise ConfigError(f"{what}: must be ≥ 0 (got {text!r})")
    return value * _FACTORS_S[unit]


def ns_to_ms(ns: int | float) -> float:
    """Nanoseconds to milliseconds."""
    return ns / NS_PER_MS


def ns_to_s(ns: int | float) -> float:
    """Nanoseconds to seconds."""
    return ns / NS_PER_S


def s_to_ns(s: float) -> int:
    """Seconds to integer nanoseconds (rounded)."""
    return round(s * NS_PER_S)


def format_ms(ms: float | None, *, digits: int = 1) -> str:
    """Human-readable milliseconds: ``12.3 ms``, ``1.52 s``; ``—`` when undefined."""
    if ms is None:
        return "—"
    if ms != ms:  # NaN
        return "—"
    if ms == float("inf"):
        return "∞"
    if abs(ms) >= 10_000:
        return f"{ms / 1000:.1f} s"
    if abs(ms) >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.{digits}f} ms"
