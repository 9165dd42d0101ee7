"""Changes a what-if projects (:mod:`tailscope.trace.whatif` states what each does to a span), parsed from the flags'
values: ``set-duration "OP=30ms"``, ``scale "OP=0.6"``, ``parallel "A,B,C"``, ``parallel-children OP``,
``cache "OP=HIT_RATE:HIT_DURATION"``, ``remove OP``, ``cap-retries "OP=N"``, ``timeout "OP=3s[:FALLBACK]"``.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
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


# --------------------------------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class Operations:
    """The operations of a trace set (its distinct span names) and which layer and service each belongs to: what a
    change's operations are checked against before a what-if runs."""

    names: frozenset[str]
    layers: dict[str, frozenset[str]]  # layer → its operations
    services: dict[str, frozenset[str]]  # service → its operations

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str | None, str | None]]) -> Operations:
        """From ``(name, service, layer)`` rows (repeats allowed)."""
        names: set[str] = set()
        layers: dict[str, set[str]] = {}
        services: dict[str, set[str]] = {}
        for name, service, layer in rows:
            names.add(name)
            if layer:
                layers.setdefault(layer, set()).add(name)
            if service:
                services.setdefault(service, set()).add(name)
        return cls(
            frozenset(names),
            {k: frozenset(v) for k, v in layers.items()},
            {k: frozenset(v) for k, v in services.items()},
        )


@dataclass(frozen=True, slots=True)
class Unmatched:
    """An operation named by a flag (a change, ``--independent``, ``--root-op``) that no span of the set matches.

    Attributes:
        change: the change, or None for a flag that is not one (then ``given`` is the flag as typed).
        operation: the name (or glob) that matches nothing.
        close: names of the set close to it (by spelling, or containing it), best first; or, when ``group`` is set,
            that group's operations.
        group: ``layer "X"`` or ``service "X"`` when the name is a layer's or a service's rather than an operation's.
        given: the flag as typed when ``change`` is None, e.g. ``--independent "A,B"``.
        effect: what the name's not matching means, the end of :meth:`message`.
    """

    change: Change | None
    operation: str
    close: tuple[str, ...] = ()
    group: str = ""
    given: str = ""
    effect: str = "it projects no saving"

    @property
    def flag(self) -> str:
        """The flag that names it, e.g. ``--scale "serch=0.5"``."""
        return self.change.flag if self.change is not None else self.given

    def hint(self) -> str:
        """What the name is near, e.g. ``did you mean 'search_a', 'search_b'?``."""
        listed = ", ".join(repr(n) for n in self.close)
        if self.group:
            return f"{self.group} is not an operation: name its operations ({listed})"
        return f"did you mean {listed}?" if listed else "no operation of the set is close to it"

    def message(self) -> str:
        """One line: the flag, the name, what it is near, and what that means."""
        return f"{self.flag}: no span is named {self.operation!r} ({self.hint()}); {self.effect}"

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "operation": self.operation, "close": list(self.close), "group": self.group}


def close_names(name: str, names: frozenset[str], n: int = 3) -> tuple[str, ...]:
    """Names close to ``name`` (a glob's wildcards dropped): by spelling, ignoring case, then names containing it."""
    bare = "".join(ch for ch in name if ch not in "*?[]").strip().lower()
    if not bare:
        return ()
    lower: dict[str, str] = {}
    for k in sorted(names):
        lower.setdefault(k.lower(), k)
    got = [lower[m] for m in difflib.get_close_matches(bare, list(lower), n=n, cutoff=0.6)]
    got += [orig for low, orig in lower.items() if bare in low and orig not in got]
    return tuple(got[:n])


def _unknown(op: str, ops: Operations, *, exact: bool = False) -> tuple[tuple[str, ...], str] | None:
    """None when ``op`` names an operation of ``ops`` (exactly, or as a glob unless ``exact``); else its close names
    and, when it is a layer's or a service's name, that group."""
    if op in ops.names or (not exact and any(matcher((op,))(n) for n in ops.names)):
        return None
    for kind, groups in (("layer", ops.layers), ("service", ops.services)):
        if op in groups:
            return tuple(sorted(groups[op])[:5]), f"{kind} {op!r}"
    return close_names(op, ops.names), ""


def roots_hint(root_op: str, roots: Iterable[str]) -> str:
    """What a ``--root-op`` that is no trace's root is near: ``did you mean 'POST /chat'?`` when a root is close to it,
    else ``roots of the set: …`` (the first five)."""
    names = frozenset(roots)
    near = close_names(root_op, names)
    if near:
        return f"did you mean {', '.join(repr(n) for n in near)}?"
    return "roots of the set: " + ", ".join(repr(n) for n in sorted(names)[:5])


def unmatched(changes: Iterable[Change], ops: Operations) -> list[Unmatched]:
    """Each operation of ``changes`` that matches no name of ``ops`` (exactly or as a glob), with its near names."""
    out: list[Unmatched] = []
    for c in changes:
        for op in c.ops:
            found = _unknown(op, ops)
            if found is not None:
                out.append(Unmatched(c, op, *found))
    return out


def unmatched_names(flag: str, names: Iterable[str], ops: Operations, *, effect: str) -> list[Unmatched]:
    """Each of ``names`` — operations a flag that is not a change names exactly (``--independent``, ``--root-op``;
    ``flag`` as typed) — that is no operation of ``ops``, with its near names; ``effect`` says what that means."""
    out: list[Unmatched] = []
    for op in names:
        found = _unknown(op, ops, exact=True)
        if found is not None:
            out.append(Unmatched(None, op, *found, given=flag, effect=effect))
    return out


def matches_nothing(changes: Sequence[Change], missing: Sequence[Unmatched]) -> bool:
    """True when every operation of every change is in ``missing`` (the changes cannot move any span)."""
    gone = {(id(u.change), u.operation) for u in missing}
    return bool(changes) and all((id(c), op) in gone for c in changes for op in c.ops)
