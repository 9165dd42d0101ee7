"""The driver ↔ worker wire format: msgpack, records and specs as positional arrays (no pickle).

Every message is one msgpack document. Requests are ``[msg_id, method, args]`` and replies ``[msg_id, ok, value]``
(``value`` is the error text when ``ok`` is false). Records travel as arrays in :class:`RequestRecord` field order —
about 3× smaller and faster than JSON objects — and are rebuilt with their enums on the driver.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import msgpack

from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.spec import RequestSpec

_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
_SPEC_FIELDS = tuple(f.name for f in fields(RequestSpec))
_I_STATUS = _RECORD_FIELDS.index("status")
_I_ERROR = _RECORD_FIELDS.index("error")
_I_SOURCE = _RECORD_FIELDS.index("tokens_source")
_I_CHUNK_T = _RECORD_FIELDS.index("chunk_times_ns")
_I_CHUNK_N = _RECORD_FIELDS.index("chunk_tokens")
_I_DEPENDS = _RECORD_FIELDS.index("depends_on")


def pack(obj: Any) -> bytes:
    """Encode one message."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    """Decode one message (arrays come back as lists)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def record_to_wire(r: RequestRecord) -> list[Any]:
    """A record as a positional array (enums as their values)."""
    out: list[Any] = [getattr(r, name) for name in _RECORD_FIELDS]
    out[_I_STATUS] = r.status.value
    out[_I_ERROR] = r.error.value if r.error is not None else None
    out[_I_SOURCE] = r.tokens_source.value
    return out


def record_from_wire(row: list[Any]) -> RequestRecord:
    """Inverse of :func:`record_to_wire`."""
    vals = list(row)
    vals[_I_STATUS] = Status(vals[_I_STATUS])
    vals[_I_ERROR] = ErrorClass(vals[_I_ERROR]) if vals[_I_ERROR] is not None else None
    vals[_I_SOURCE] = TokensSource(vals[_I_SOURCE])
    vals[_I_CHUNK_T] = tuple(vals[_I_CHUNK_T])
    vals[_I_CHUNK_N] = tuple(vals[_I_CHUNK_N])
    vals[_I_DEPENDS] = tuple(vals[_I_DEPENDS])
    return RequestRecord(*vals)


def spec_to_wire(s: RequestSpec) -> list[Any]:
    """A request spec as a positional array."""
    return [getattr(s, name) for name in _SPEC_FIELDS]


_I_MESSAGES = _SPEC_FIELDS.index("messages")
_I_AFTER = _SPEC_FIELDS.index("after")
_I_ANSWERS = _SPEC_FIELDS.index("answers_from")


def spec_from_wire(row: list[Any]) -> RequestSpec:
    """Inverse of :func:`spec_to_wire`."""
    vals = list(row)
    if vals[_I_MESSAGES] is not None:
        vals[_I_MESSAGES] = tuple((str(r), str(c)) for r, c in vals[_I_MESSAGES])
    vals[_I_AFTER] = tuple((int(i), int(gap)) for i, gap in vals[_I_AFTER])
    vals[_I_ANSWERS] = tuple(int(i) for i in vals[_I_ANSWERS])
    return RequestSpec(*vals)
