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
    """A request record as a flat dict with the store's column names (enums as their string values)."""
    return {
        "run_id": run_id,
        "id": r.id,
        "request_class": r.request_class,
        "session_id": r.session_id,
        "turn": r.turn,
        "scheduled_ns": r.scheduled_ns,
        "sent_ns": r.sent_ns,
        "first_token_ns": r.first_token_ns,
        "end_ns": r.end_ns,
        "stream_end_ns": r.stream_end_ns,
        "first_event_ns": r.first_event_ns,
        "status": r.status.value,
        "error": r.error.value if r.error else None,
        "error_detail": r.error_detail,
        "http_status": r.http_status,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "tokens_source": r.tokens_source.value,
        "server_request_id": r.server_request_id,
        "chunk_times_ns": list(r.chunk_times_ns),
        "chunk_tokens": list(r.chunk_tokens),
        "warmup": r.warmup,
        "shared_prefix": r.shared_prefix,
        "worker": r.worker,
        "trace_id": r.trace_id,
        "span_id": r.span_id,
        "first_answer_ns": r.first_answer_ns,
        "reasoning_tokens": r.reasoning_tokens,
        "cached_tokens": r.cached_tokens,
        "connection_reused": r.connection_reused,
        "dns_ns": r.dns_ns,
        "connect_ns": r.connect_ns,
        "tls_ns": r.tls_ns,
        "step": r.step,
        "depends_on": list(r.depends_on),
        "session_calls": r.session_calls,
    }


def row_to_record(row: dict[str, Any]) -> RequestRecord:
    """Inverse of :func:`record_to_row`."""
    return RequestRecord(
        id=int(row["id"]),
        request_class=row["request_class"] or "default",
        session_id=row["session_id"],
        turn=row["turn"],
        scheduled_ns=int(row["scheduled_ns"]),
        sent_ns=row["sent_ns"],
        first_token_ns=row["first_token_ns"],
        end_ns=row["end_ns"],
        stream_end_ns=row["stream_end_ns"],
        first_event_ns=row["first_event_ns"],
        status=Status(row["status"]),
        error=ErrorClass(row["error"]) if row["error"] else None,
        error_detail=row["error_detail"],
        http_status=row["http_status"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        requested_output_tokens=row["requested_output_tokens"],
        tokens_source=TokensSource(row["tokens_source"]),
        server_request_id=row["server_request_id"],
        chunk_times_ns=tuple(row["chunk_times_ns"] or ()),
        chunk_tokens=tuple(row["chunk_tokens"] or ()),
        warmup=bool(row["warmup"]),
        shared_prefix=bool(row["shared_prefix"]),
        worker=int(row["worker"] or 0),
        trace_id=row.get("trace_id"),
        span_id=row.get("span_id"),
        first_answer_ns=row.get("first_answer_ns"),
        reasoning_tokens=row.get("reasoning_tokens"),
        cached_tokens=row.get("cached_tokens"),
        connection_reused=row.get("connection_reused"),
        dns_ns=row.get("dns_ns"),
        connect_ns=row.get("connect_ns"),
        tls_ns=row.get("tls_ns"),
        step=row.get("step"),
        depends_on=tuple(row.get("depends_on") or ()),
        session_calls=row.get("session_calls"),
    )


def encode_record_line(run_id: str, r: RequestRecord) -> str:
    """One JSON line for a batch file."""
    return json.dumps(record_to_row(run_id, r), separators=(",", ":"))


def sample_to_row(run_id: str, s: ServerSample) -> dict[str, Any]:
    return {"run_id": run_id, "t_ns": s.t_ns, "name": s.name, "labels": s.labels, "value": s.value}


def row_to_sample(row: dict[str, Any]) -> ServerSample:
    return ServerSample(t_ns=int(row["t_ns"]), name=row["name"], value=float(row["value"]), labels=row["labels"] or "")
