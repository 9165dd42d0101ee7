"""Bounds on every value the store writes, so that no value can make a batch impossible to fold.

DuckDB refuses a whole batch file for one value it cannot cast (an integer beyond its column's range, a string with
a lone UTF-16 surrogate), and before these checks one such value blocked every later fold of the store. Values are
therefore checked in Python before they reach a batch file:

- an integer outside its column's range (``INTEGER``: ±2³¹, ``BIGINT``: ±2⁶³), or a value of the wrong type, is
  stored as empty (NULL) — the record keeps every other field;
- a list of integers with one element out of range is stored empty (the per-chunk data of that record is lost,
  never the record);
- text has lone surrogates replaced (U+FFFD) and is cut at :data:`MAX_TEXT` characters;
- a ``DOUBLE`` that does not fit a float is stored as empty; NaN and ±∞ are kept (DuckDB stores them).

Every bounded value is counted in a :class:`BoundNotes`, which the run reports as a warning. Run rows are checked
too (:func:`check_run`): a value there comes from the user before any load is sent, so it is refused with a
:class:`~tailscope.errors.StoreError` instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailscope.errors import StoreError
from tailscope.records import ErrorClass, Run, Status, TokensSource

#: Longest text value stored (characters); longer values are cut and marked.
MAX_TEXT = 65_536

INT_RANGES: dict[str, tuple[int, int]] = {
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}

#: What a run id may look like (it names a folder under ``pending/``).
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

STATUS_VALUES = tuple(s.value for s in Status)
ERROR_VALUES = tuple(e.value for e in ErrorClass)
TOKENS_SOURCE_VALUES = tuple(t.value for t in TokensSource)


@dataclass(slots=True)
class BoundNotes:
    """Counts of values the store had to bound, per field, with the first offending value of each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, value: Any, how: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        if name not in self.examples:
            text = repr(value)
            self.examples[name] = (text[:60] + "…" if len(text) > 60 else text) + f" ({how})"

    def __bool__(self) -> bool:
        return bool(self.counts)

    def lines(self) -> list[str]:
        """One human line per field, e.g. ``requested_output_tokens: 24 values bounded, e.g. 10**12 (…)``."""
        return [
            f"store: {name} of {n} row(s) could not be stored as given and was bounded, e.g. {self.examples[name]}"
            for name, n in sorted(self.counts.items())
        ]


def bound_text(value: str, name: str, notes: BoundNotes) -> str:
    """``value`` with lone surrogates replaced and cut at :data:`MAX_TEXT` characters."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            notes.add(name, value, "lone surrogates replaced")
            value = value.encode("utf-8", "replace").decode("utf-8")
    if len(value) > MAX_TEXT:
        notes.add(name, value, f"cut at {MAX_TEXT:,} characters")
        value = value[:MAX_TEXT] + "…[cut]"
    return value


def json_safe(obj: Any) -> Any:
    """``obj`` (JSON-like) with what DuckDB's JSON reader refuses made storable: lone surrogates in text replaced,
    integers beyond the 64-bit range written as text. For the rare rows a fast encoder refused (the slow path)."""
    if isinstance(obj, str):
        return bound_text(obj, "", BoundNotes())
    if isinstance(obj, bool) or obj is None or isinstance(obj, float):
        return obj
    if isinstance(obj, int):
        lo, hi = INT_RANGES["BIGINT"]
        return obj if lo <= obj <= hi else str(obj)
    if isinstance(obj, dict):
        return {json_safe(k) if isinstance(k, str) else k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def _bound_int(value: Any, name: str, kind: str, notes: BoundNotes) -> int | None:
    lo, hi = INT_RANGES[kind]
    if type(value) is int:
        if lo <= value <= hi:
            return value
        notes.add(name, value, f"beyond the {kind} range, stored empty")
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer() and lo <= value <= hi:
        return int(value)
    notes.add(name, value, "not an integer, stored empty")
    return None


def _bound_int_list(value: Any, name: str, kind: str, notes: BoundNotes) -> list[int]:
    if type(value) is not list and not isinstance(value, tuple):
        notes.add(name, value, "not a list, stored empty")
        return []
    if not value:
        return []
    lo, hi = INT_RANGES[kind]
    try:
        # min/max run in C; a non-number raises. A float element is rounded by DuckDB, never refused.
        ok = lo <= min(value) and max(value) <= hi
    except TypeError:
        ok = False
    if ok:
        return value if isinstance(value, list) else list(value)
    notes.add(name, value, "an element beyond the range or not an integer, stored empty")
    return []


def _bound_double(value: Any, name: str, notes: BoundNotes) -> float | None:
    if type(value) is float:
        return value
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        notes.add(name, value, "not a number, stored empty")
        return None


_INT, _TEXT, _LIST, _BOOL, _DOUBLE, _OTHER = range(6)
_PLANS: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str, int, int, int], ...]] = {}


def _plan(columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, int, int, int], ...]:
    """(name, type, check, lo, hi) per column, computed once per column set."""
    plan = _PLANS.get(columns)
    if plan is None:
        out = []
        for name, kind in columns:
            base = kind[:-2] if kind.endswith("[]") else kind
            lo, hi = INT_RANGES.get(base, (0, 0))
            if kind.endswith("[]"):
                check = _LIST
            elif kind in INT_RANGES:
                check = _INT
            else:
                check = {"VARCHAR": _TEXT, "BOOLEAN": _BOOL, "DOUBLE": _DOUBLE}.get(kind, _OTHER)
            out.append((name, base, check, lo, hi))
        plan = _PLANS[columns] = tuple(out)
    return plan


def bound_row(row: dict[str, Any], columns: tuple[tuple[str, str], ...], notes: BoundNotes) -> dict[str, Any]:
    """``row`` with every value made storable in its column (see the module docstring); changes are counted.

    The common case (every value already fits) costs a few type checks per field and one min/max per list.
    """
    for name, kind, check, lo, hi in _plan(columns):
        v = row.get(name)
        if v is None:
            continue
        if check == _INT:
            if type(v) is not int or not lo <= v <= hi:
                row[name] = _bound_int(v, name, kind, notes)
        elif check == _TEXT:
            if type(v) is not str or not v.isascii() or len(v) > MAX_TEXT:
                row[name] = bound_text(v if type(v) is str else str(v), name, notes)
        elif check == _LIST:
            row[name] = _bound_int_list(v, name, kind, notes)
        elif check == _BOOL:
            if type(v) is not bool:
                row[name] = bool(v)
        elif check == _DOUBLE and type(v) is not float:
            row[name] = _bound_double(v, name, notes)
    return row


def request_row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a request row read back from a batch file cannot be a record (None when it can)."""
    for name in ("id", "scheduled_ns"):
        if type(row.get(name)) is not int:
            return f"{name} missing or not an integer"
    if row.get("status") not in STATUS_VALUES:
        return f"status {row.get('status')!r} is not one of {', '.join(STATUS_VALUES)}"
    if row.get("error") is not None and row.get("error") not in ERROR_VALUES:
        return f"error {row.get('error')!r} is not an error class"
    if row.get("tokens_source") not in TOKENS_SOURCE_VALUES:
        return f"tokens_source {row.get('tokens_source')!r} is not one of {', '.join(TOKENS_SOURCE_VALUES)}"
    return None


def sample_row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a server-sample row read back from a batch file cannot be a sample (None when it can)."""
    if type(row.get("t_ns")) is not int:
        return "t_ns missing or not an integer"
    if type(row.get("name")) is not str:
        return "name missing"
    if not isinstance(row.get("value"), int | float):
        return "value missing or not a number"
    return None


def check_run(run: Run) -> None:
    """Refuse a run whose identity or settings cannot be stored, naming the value and what to do.

    Raises:
        StoreError: for an id that cannot name a folder, or a seed outside the 64-bit range.
    """
    if not RUN_ID_RE.fullmatch(run.id) or ".." in run.id:
        raise StoreError(f"run id {run.id!r} cannot be stored: use letters, digits, '.', '_' and '-' (≤ 128)")
    lo, hi = INT_RANGES["BIGINT"]
    if not lo <= run.seed <= hi:
        raise StoreError(f"--seed {run.seed} cannot be stored: use a seed between 0 and {hi:,}")
