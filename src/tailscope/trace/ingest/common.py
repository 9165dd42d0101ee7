"""Shared pieces of the trace parsers: ids, int64 times, enums, problems with positions, span construction."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tailscope.records import Span
from tailscope.trace.layers import LayerRule, classify

_HEX = re.compile(r"^[0-9a-fA-F]+$")
_B64 = re.compile(r"^[A-Za-z0-9+/_-]+={0,2}$")

KINDS = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
KIND_BY_INT = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_BY_INT = {0: "UNSET", 1: "OK", 2: "ERROR"}


@dataclass(frozen=True, slots=True)
class Problem:
    """One piece of bad input: where (file and position) and what."""

    source: str
    position: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.position}: {self.message}" if self.position else f"{self.source}: {self.message}"


@dataclass(slots=True)
class ParseContext:
    """Where the parser is and what it has found wrong so far; also the user's layer rules."""

    source: str
    rules: Sequence[LayerRule] = ()
    problems: list[Problem] = field(default_factory=list)
    max_problems: int = 1000
    dropped: int = 0

    def problem(self, position: str, message: str) -> None:
        """Record a problem (the first ``max_problems`` are kept; the rest are only counted)."""
        self.dropped += 1
        if len(self.problems) < self.max_problems:
            self.problems.append(Problem(self.source, position, message))


def loads_json(data: bytes | str) -> Any:
    """Parse one JSON document like :func:`json.loads`, with orjson (several times faster on OTLP documents).

    What orjson refuses and the stdlib accepts — escapes of lone surrogates (text the store keeps, made storable),
    ``NaN``/``Infinity``, very deep nesting — and every error go to the stdlib, so results and error positions are
    those of :mod:`json`. One difference remains: an integer literal beyond 64 bits becomes a float; no valid time is
    that large, and :func:`parse_int` refuses floats outside int64, so such a time is reported as not an integer
    instead of being rounded into one. A leading UTF-8 byte-order mark is skipped.

    Raises:
        json.JSONDecodeError: with ``msg``, ``lineno`` and ``colno`` of the first error (invalid UTF-8 included).
    """
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
    elif data.startswith("\ufeff"):
        data = data[1:]
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError(f"not UTF-8 text ({exc.reason})", "", exc.start) from None
    return json.loads(data)


#: The caches of :func:`normalize_id` per width: id text → normalised id (None for an unusable id).
_ID_CACHES: dict[int, dict[str | bytes, str | None]] = {16: {}, 32: {}}
_SPAN_IDS = _ID_CACHES[16]
_TRACE_IDS = _ID_CACHES[32]


def normalize_id(value: Any, *, width: int) -> str | None:
    """A trace or span id as lowercase hex, from hex or base64 text (or raw bytes).

    Hex is recognised by alphabet (``0-9a-f`` only) and padded on the left to ``width`` hex digits (16 for span ids,
    32 for trace ids; 128-bit trace ids stay 32). Other text is decoded as base64 (standard or URL-safe, padding
    optional) when it yields 8 or 16 bytes. Anything else is kept verbatim. Empty and all-zero ids are ``None``.
    """
    if value is None:
        return None
    if type(value) is str or type(value) is bytes:
        cache = _ID_CACHES.setdefault(width, {})
        hit = cache.get(value, "")
        if hit != "":
            return hit
        if len(cache) > 200_000:
            cache.clear()
        out = cache[value] = _normalize_id(value, width)
        return out
    return _normalize_id(value, width)


def _normalize_id(value: Any, width: int) -> str | None:
    if isinstance(value, bytes | bytearray):
        if not value.strip(b"\0"):
            return None
        text = bytes(value).hex()  # lowercase hex already
        if len(text) == width or len(text) == 32:
            return text
    elif isinstance(value, int) and not isinstance(value, bool):
        text = format(value, "x")
    else:
        text = str(value).strip()
        if not text:
            return None
        if not _HEX.match(text) and _B64.match(text):
            raw = text.replace("-", "+").replace("_", "/")
            raw += "=" * (-len(raw) % 4)
            try:
                decoded = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            if len(decoded) in (8, 16):
                text = decoded.hex()
    if _HEX.match(text):
        text = text.lower()
        if len(text) <= width:
            text = text.rjust(width, "0")
        elif len(text) < 32:
            text = text.rjust(32, "0")
        if not text.strip("0"):
            return None
    return text


_INT64_MIN = -(2.0**63)
_INT64_END = 2.0**63


def parse_int(value: Any) -> int | None:
    """An int64 from an int or a decimal string, never through float; integral floats in the int64 range are accepted
    as such (a float beyond it may be an integer literal that lost its precision in the JSON parser)."""
    t = type(value)
    if t is int:
        return value  # type: ignore[no-any-return]
    if t is str:
        try:
            return int(value)
        except ValueError:
            pass
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer() and _INT64_MIN < value < _INT64_END:
        return int(value)
    return None


def parse_kind(value: Any) -> str:
    """Span kind from an int (OTLP enum) or a name (``SPAN_KIND_SERVER``, ``server``, ``SERVER``)."""
    return _otlp_enum(value, KIND_BY_INT, "SPAN_KIND_", KINDS, "INTERNAL")


def parse_status(value: Any) -> str:
    """Status code from an int or a name (``STATUS_CODE_ERROR``, ``ERROR``, ``error``)."""
    return _otlp_enum(value, STATUS_BY_INT, "STATUS_CODE_", ("UNSET", "OK", "ERROR"), "UNSET")


def _otlp_enum(value: Any, by_int: Mapping[int, str], prefix: str, names: Collection[str], default: str) -> str:
    """An OTLP enum given as its number (an int or digits) or its name (``prefix`` optional, any case); ``default``
    when absent or unknown."""
    if value is None:
        return default
    if isinstance(value, int):
        return by_int.get(value, default)
    text = str(value).strip().upper().removeprefix(prefix)
    if text.isdigit():
        return by_int.get(int(text), default)
    return text if text in names else default


#: The store's time columns are signed 64-bit nanoseconds.
_NS_MIN, _NS_MAX = -(2**63), 2**63 - 1


def _pos(position: str | tuple[str, int]) -> str:
    return f"{position[0]}[{position[1]}]" if isinstance(position, tuple) else position


def make_row(
    ctx: ParseContext,
    position: str | tuple[str, int],
    trace_id: Any,
    span_id: Any,
    parent_id: Any,
    name: Any,
    start_ns: int | None,
    end_ns: int | None,
    service: str,
    kind: str,
    status: str,
    attributes: Mapping[str, Any],
    links: tuple[tuple[str, str], ...] = (),
    follows_from: bool = False,
) -> dict[str, Any] | None:
    """Validate one span and make it the store's batch row (layer classified); record a problem and return None when
    it is unusable. Every parser builds its spans here, so every format is validated and reported the same way.

    ``position`` is a JSON path, or ``(array path, index)`` formatted only when a problem is recorded. The row has
    the store's columns (``store.spans.SPAN_COLUMNS``); :func:`row_span` makes it a :class:`~tailscope.records.Span`.
    """
    # Ids seen before are looked up in normalize_id's caches here: this runs once per span of every file.
    tid = _TRACE_IDS.get(trace_id) if type(trace_id) is str or type(trace_id) is bytes else None
    if tid is None and (tid := normalize_id(trace_id, width=32)) is None:
        ctx.problem(_pos(position), "span without trace id, skipped")
        return None
    sid = _SPAN_IDS.get(span_id) if type(span_id) is str or type(span_id) is bytes else None
    if sid is None and (sid := normalize_id(span_id, width=16)) is None:
        ctx.problem(_pos(position), "span without span id, skipped")
        return None
    if start_ns is None or end_ns is None:
        ctx.problem(_pos(position), f"span {sid}: start/end time missing or not an integer, skipped")
        return None
    if not (_NS_MIN <= start_ns <= _NS_MAX and _NS_MIN <= end_ns <= _NS_MAX):
        ctx.problem(_pos(position), f"span {sid}: start/end time beyond the store's 64-bit range, skipped")
        return None
    if end_ns < start_ns:
        ctx.problem(_pos(position), f"span {sid}: ends before it starts ({end_ns} < {start_ns}); end set to start")
        end_ns = start_ns
    if parent_id is not None:
        pid = _SPAN_IDS.get(parent_id) if type(parent_id) is str or type(parent_id) is bytes else None
        if pid is None:
            pid = normalize_id(parent_id, width=16)
    else:
        pid = None
    name_s = name if type(name) is str else str(name) if name is not None else ""
    attrs = attributes if type(attributes) is dict else dict(attributes)
    resend = attrs.get("http.request.resend_count") if attrs else None
    return {  # the store's SPAN_COLUMNS, in order
        "trace_id": tid,
        "span_id": sid,
        "parent_id": pid,
        "name": name_s,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "service": service,
        "kind": kind,
        "status": status,
        "layer": classify(name_s, kind, attrs, service=service, rules=ctx.rules),
        "follows_from": follows_from,
        "resend": resend if isinstance(resend, int) and 0 <= resend < 2**31 else None,
        "attributes": attrs or None,
        "links": links or None,
    }


def row_span(row: Mapping[str, Any]) -> Span:
    """A batch row (:func:`make_row`) as a :class:`~tailscope.records.Span`."""
    return Span(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_id=row["parent_id"],
        name=row["name"],
        start_ns=row["start_ns"],
        end_ns=row["end_ns"],
        service=row["service"],
        kind=row["kind"],
        status=row["status"],
        attributes=row["attributes"] or {},
        links=row["links"] or (),
        layer=row["layer"],
        follows_from=row["follows_from"],
    )
