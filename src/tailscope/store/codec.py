"""Conversion between result records and store rows / JSON-lines batch files."""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import orjson

from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status, TokensSource
from tailscope.store.bounds import INT_RANGES, MAX_TEXT, BoundNotes, bound_row, request_row_problem
from tailscope.store.db import REQUEST_COLUMNS

_REQUEST_FIELDS = tuple(name for name, _ in REQUEST_COLUMNS if name != "run_id")
_REQUEST_NAMES = tuple(name for name, _ in REQUEST_COLUMNS)
_ENUMS = ("status", "error", "tokens_source")
_LIST_FIELDS = tuple(name for name, kind in REQUEST_COLUMNS if kind.endswith("[]"))


def _getter(kind: str) -> Callable[[RequestRecord], tuple[Any, ...]]:
    """The record's values of the columns of one type, as a tuple (enums apart), read in one C call."""
    names = [n for n, k in REQUEST_COLUMNS if k == kind and n != "run_id" and n not in _ENUMS]
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda r: (get(r),)


# the record's fields by column type, each read in one C call (the fast path's checks)
_ALL = attrgetter(*_REQUEST_FIELDS)
_INT32, _INT64, _TEXT, _BOOL = _getter("INTEGER"), _getter("BIGINT"), _getter("VARCHAR"), _getter("BOOLEAN")
_INT32_LISTS = _getter("INTEGER[]")
_INT64_LISTS = _getter("BIGINT[]")
_NONE = type(None)
_INT32_LO, _INT32_HI = INT_RANGES["INTEGER"]
_INT64_LO, _INT64_HI = INT_RANGES["BIGINT"]
#: The fast path's encoding: orjson refuses an integer beyond ±2⁵³ (well inside BIGINT; nanoseconds since a run's start
#: reach it after 104 days), so a successful encoding is the BIGINT range check; such a rare value takes the careful
#: path, which stores anything within ±2⁶³.
_FAST = orjson.OPT_APPEND_NEWLINE | orjson.OPT_STRICT_INTEGER
_NL = orjson.OPT_APPEND_NEWLINE


def _storable_as_is(r: RequestRecord) -> bool:
    """Whether every field of ``r`` already fits its column — then :func:`~tailscope.store.bounds.bound_row` would
    change nothing and the row has no problem — up to the BIGINT range, which the fast encoding checks (``_FAST``).

    C-level reads and type sets instead of a Python step per field, and one count for the per-chunk token counts
    (mostly all alike) instead of their ``min`` and ``max``: the per-chunk lists are most of a record (two of 256
    values for a 256-token answer).
    """
    if type(r.id) is not int or type(r.scheduled_ns) is not int:
        return False
    if type(r.status) is not Status or type(r.tokens_source) is not TokensSource:
        return False
    if r.error is not None and type(r.error) is not ErrorClass:
        return False
    if not set(map(type, _INT64(r))) <= {int, _NONE}:
        return False
    small = [v for v in _INT32(r) if v is not None]
    if small and (set(map(type, small)) != {int} or min(small) < _INT32_LO or max(small) > _INT32_HI):
        return False
    if not set(map(type, _BOOL(r))) <= {bool, _NONE}:
        return False
    for v in _TEXT(r):
        if v is not None and (type(v) is not str or not v.isascii() or len(v) > MAX_TEXT):
            return False
    try:
        for v in _INT64_LISTS(r):
            # as bound_row: min() and max() raise for what cannot be a number (a float element is kept, as there)
            if (type(v) is not tuple and type(v) is not list) or (v and (min(v) < _INT64_LO or max(v) > _INT64_HI)):
                return False
        for v in _INT32_LISTS(r):
            if type(v) is not tuple and type(v) is not list:
                return False
            if v:
                # per-chunk token counts are mostly all alike: one C-level count checks that, then one value's range
                first = v[0]
                lo, hi = (first, first) if v.count(first) == len(v) else (min(v), max(v))
                if lo < _INT32_LO or hi > _INT32_HI:
                    return False
    except TypeError:
        return False
    return True


def request_line(run_id: str, r: RequestRecord, notes: BoundNotes) -> tuple[bytes, str | None]:
    """One batch-file line for ``r`` (ending in a newline), and why it cannot be a record (None when it can).

    A record whose every value already fits its column — every record a run makes, in practice — is encoded straight
    from its fields (tuples and enums as orjson writes them): ≈ a third less CPU than building the row dict, bounding it
    field by field (:func:`~tailscope.store.bounds.bound_row`) and encoding it, which remains the path for a record
    with a value to bound (counted in ``notes``). Both give the same bytes (``tests/unit/store/test_codec.py``).
    """
    if _storable_as_is(r):
        try:
            return orjson.dumps(dict(zip(_REQUEST_NAMES, (run_id, *_ALL(r)), strict=True)), option=_FAST), None
        except (orjson.JSONEncodeError, TypeError):
            pass  # an integer beyond ±2⁵³, or a value orjson cannot write: the careful path says what it is
    row = bound_row(record_to_row(run_id, r), REQUEST_COLUMNS, notes)
    return orjson.dumps(row, option=_NL), request_row_problem(row)


def record_to_row(run_id: str, r: RequestRecord) -> dict[str, Any]:
    """A request record as a flat dict with the store's column names (enums as their string values, lists as lists)."""
    row = dict(zip(_REQUEST_NAMES, (run_id, *_ALL(r)), strict=True))
    row["status"] = r.status.value
    row["error"] = r.error.value if r.error else None
    row["tokens_source"] = r.tokens_source.value
    for name in _LIST_FIELDS:
        row[name] = list(row[name])
    return row


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v or ())


#: How a stored value becomes the record's; every other column is taken as it is (None where an older store lacks it).
_FROM_ROW: dict[str, Callable[[Any], Any]] = {
    "id": int,
    "request_class": lambda v: v or "default",
    "scheduled_ns": int,
    "status": Status,
    "error": lambda v: ErrorClass(v) if v else None,
    "tokens_source": TokensSource,
    "warmup": bool,
    "shared_prefix": bool,
    "worker": lambda v: int(v or 0),
    **dict.fromkeys(_LIST_FIELDS, _tuple),
}
_PLAIN_FIELDS = tuple(name for name in _REQUEST_FIELDS if name not in _FROM_ROW)


def row_to_record(row: dict[str, Any]) -> RequestRecord:
    """Inverse of :func:`record_to_row`."""
    kw: dict[str, Any] = {name: row.get(name) for name in _PLAIN_FIELDS}
    for name, convert in _FROM_ROW.items():
        kw[name] = convert(row.get(name))
    return RequestRecord(**kw)


def encode_record_line(run_id: str, r: RequestRecord) -> str:
    """One JSON line for a batch file."""
    return json.dumps(record_to_row(run_id, r), separators=(",", ":"))


def sample_to_row(run_id: str, s: ServerSample) -> dict[str, Any]:
    return {"run_id": run_id, "t_ns": s.t_ns, "name": s.name, "labels": s.labels, "value": s.value}


def row_to_sample(row: dict[str, Any]) -> ServerSample:
    return ServerSample(t_ns=int(row["t_ns"]), name=row["name"], value=float(row["value"]), labels=row["labels"] or "")
