"""Finding the span arrays of a large OTLP JSON document in its bytes, without parsing the document whole.

Parsing a document of a million spans into Python objects only to cut its span arrays into slices (and freeing those
objects again) cost the main process about 10 s before any worker could start. Instead, the bytes are scanned with
numpy, chunk by chunk: quotes that are not escaped open and close strings; outside strings, ``{``/``[`` and ``}``/``]``
move the nesting depth, and the commas at the depth of a plain OTLP document's span arrays
(``{"resourceSpans":[{"scopeSpans":[{"spans":[…``, depth 6) separate its span objects. Only tokens at depth 6 or less
are kept (about two per span), so memory stays a small fraction of the document's size.

Each span array's contents are then replaced by a marker string, and the small *skeleton* that remains is parsed as
usual (:func:`~tailscope.trace.ingest.otlp.otlp_span_lists` walks it, reporting problems of the structure at the
positions of the whole document). The slices of the arrays are parsed by the workers; a slice that is not valid JSON
(damage that keeps the brackets balanced) sends the whole file back to the ordinary reader, which reports and salvages
it as before.

A Jaeger query-API document (``{"data":[{traceID, spans, processes}, …]}``) is cut the same way one level up
(:func:`trace_array`): the commas at depth 2 separate its trace objects, each of which keeps its own ``processes``
map, so the workers parse whole traces and only ``{"data":["<marker>"], …}`` is parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: Nesting depth inside the span arrays of ``{"resourceSpans":[{"scopeSpans":[{"spans":[``.
SPANS_DEPTH = 6
#: Bytes scanned at a time (bounds the scan's temporary arrays).
CHUNK = 1 << 23

_SPANS_KEY = re.compile(rb'"spans"\s*:\s*\[')
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
#: Nesting depth inside the trace list of a Jaeger document ``{"data":[``.
TRACES_DEPTH = 2
_MARKER = "tailscope:raw-span-array:"

_QUOTE, _BACKSLASH, _COMMA = 34, 92, 44
_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1
_TOKEN = np.zeros(256, dtype=bool)
_TOKEN[[ord("{"), ord("["), ord("}"), ord("]"), _COMMA]] = True


@dataclass(frozen=True, slots=True)
class RawArray:
    """One span array of the document: its elements as byte ranges.

    ``bounds[k]`` is where element ``k`` starts; element ``k`` ends one byte before ``bounds[k + 1]`` (at its comma,
    or at the closing bracket for the last one).
    """

    raw: bytes
    bounds: np.ndarray

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, part: slice) -> bytes:
        """Elements ``part.start`` to ``part.stop`` (exclusive) as a JSON array."""
        return b"[" + self.raw[self.bounds[part.start] : self.bounds[part.stop] - 1] + b"]"


def marker(k: int) -> str:
    """The string that stands for span array ``k`` in the skeleton."""
    return f"{_MARKER}{k}"


def marker_index(spans: list[object]) -> int | None:
    """The array a skeleton's spans list stands for (None: it is not a marker)."""
    if len(spans) == 1 and isinstance(spans[0], str) and spans[0].startswith(_MARKER):
        tail = spans[0][len(_MARKER) :]
        return int(tail) if tail.isdigit() else None
    return None


def _tokens(raw: bytes, max_depth: int = SPANS_DEPTH) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Positions, depths (after the token) and bytes of the structural tokens outside strings at depth
    ``max_depth`` or less; None when the brackets or quotes do not balance."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    quotes = 0  # unescaped quotes before the chunk
    depth = 0
    kept_pos: list[np.ndarray] = []
    kept_depth: list[np.ndarray] = []
    for base in range(0, buf.size, CHUNK):
        c = buf[base : base + CHUNK]
        q = np.flatnonzero(c == _QUOTE)
        if q.size:
            q += base
            # a quote is escaped when an odd run of backslashes precedes it
            cand = q[(q > 0) & (buf[np.maximum(q - 1, 0)] == _BACKSLASH)]
            if cand.size:
                run = np.ones(cand.size, dtype=np.int64)
                active = np.ones(cand.size, dtype=bool)
                k = 2
                while active.any():
                    at = cand - k
                    more = active & (at >= 0)
                    more[more] = buf[at[more]] == _BACKSLASH
                    run += more
                    active = more
                    k += 1
                escaped = cand[run % 2 == 1]
                if escaped.size:
                    q = q[~np.isin(q, escaped)]
        t = np.flatnonzero(_TOKEN[c]) + base
        if t.size:
            outside = ((quotes + np.searchsorted(q, t)) & 1) == 0
            t = t[outside]
        quotes += q.size
        if not t.size:
            continue
        d = depth + np.cumsum(_DELTA[buf[t]], dtype=np.int64)
        if d.min() < 0:
            return None
        depth = int(d[-1])
        keep = d <= max_depth
        kept_pos.append(t[keep])
        kept_depth.append(d[keep].astype(np.int8))
    if depth != 0 or quotes % 2:
        return None
    if not kept_pos:
        return None
    pos = np.concatenate(kept_pos)
    return pos, np.concatenate(kept_depth), buf[pos]


def _bounds(raw: bytes, open_at: int, close_at: int, inner: np.ndarray) -> np.ndarray:
    """Element bounds (see :class:`RawArray`) of the array from ``open_at`` (its ``[``) to ``close_at`` (its ``]``)
    with separating commas at ``inner``."""
    if inner.size or raw[open_at + 1 : close_at].strip():
        return np.concatenate(([open_at + 1], inner + 1, [close_at + 1]))
    return np.array([open_at + 1])  # an empty array


def span_arrays(raw: bytes) -> tuple[bytes, list[RawArray]] | None:
    """The skeleton of an OTLP JSON document (each span array's contents replaced by :func:`marker` ``k``) and its
    span arrays; None when the bytes do not balance or hold no span array at the usual depth (read the document
    whole then)."""
    found = _tokens(raw)
    if found is None:
        return None
    pos, dep, ch = found
    closers = np.flatnonzero(dep == SPANS_DEPTH - 1)
    seps = np.flatnonzero((dep == SPANS_DEPTH) & (ch == _COMMA))
    arrays: list[RawArray] = []
    parts: list[bytes] = []
    prev = 0
    for m in _SPANS_KEY.finditer(raw):
        open_at = m.end() - 1
        i = int(np.searchsorted(pos, open_at))
        if i >= pos.size or pos[i] != open_at or dep[i] != SPANS_DEPTH:
            continue  # inside a string, or nested elsewhere: not a span array of the usual shape
        j = int(np.searchsorted(closers, i))
        if j >= closers.size:
            return None
        close = int(closers[j])
        if ch[close] != ord("]"):
            return None
        close_at = int(pos[close])
        inner = pos[seps[np.searchsorted(seps, i) : np.searchsorted(seps, close)]]
        parts += [raw[prev : open_at + 1], b'"', marker(len(arrays)).encode(), b'"']
        prev = close_at
        arrays.append(RawArray(raw, _bounds(raw, open_at, close_at, inner)))
    if not arrays:
        return None
    parts.append(raw[prev:])
    return b"".join(parts), arrays


def looks_like_jaeger(raw: bytes) -> bool:
    """Whether a ``"data": [`` key shows in the document's first 64 KiB (the query API writes it first): worth trying
    :func:`trace_array` before :func:`span_arrays`. Only an order of attempts: each checks the document itself."""
    return _DATA_KEY.search(raw, 0, 1 << 16) is not None


def trace_array(raw: bytes) -> tuple[bytes, RawArray] | None:
    """The skeleton of a Jaeger query-API document (the top-level ``data`` list's contents replaced by
    :func:`marker` ``0``) and that list's trace objects; None when the bytes do not balance or the top-level object
    has no single ``"data": [`` (parse the document whole then)."""
    found = _tokens(raw, TRACES_DEPTH)
    if found is None:
        return None
    pos, dep, ch = found
    opens = []
    for m in _DATA_KEY.finditer(raw):
        open_at = m.end() - 1
        i = int(np.searchsorted(pos, open_at))
        if i < pos.size and pos[i] == open_at and dep[i] == TRACES_DEPTH:
            opens.append((open_at, i))  # outside strings, in the top-level object
    if len(opens) != 1:
        return None
    open_at, i = opens[0]
    closers = np.flatnonzero(dep == TRACES_DEPTH - 1)
    j = int(np.searchsorted(closers, i))
    if j >= closers.size or ch[closers[j]] != ord("]"):
        return None
    close = int(closers[j])
    close_at = int(pos[close])
    between = np.arange(i + 1, close)
    inner = pos[between[(dep[between] == TRACES_DEPTH) & (ch[between] == _COMMA)]]
    skeleton = b"".join([raw[: open_at + 1], b'"', marker(0).encode(), b'"', raw[close_at:]])
    return skeleton, RawArray(raw, _bounds(raw, open_at, close_at, inner))
