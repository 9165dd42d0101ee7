"""The export document: run, summary and per-request records as JSON-ready dicts (key names are a stable interface).

Pure: builds dicts (the command line writes them with :func:`tailscope.cli.common.write_export`). Times of requests
are in seconds since the run start here (nanoseconds in the store and in Parquet/CSV exports); docs/metrics.md has the
layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
import orjson

from tailscope.metrics.chunk_times import ChunkTimes
from tailscope.records import ErrorClass, RequestRecord, Run, Status, TokensSource

#: records encoded per chunk of :func:`export_chunks` (bounds the memory of the text held at once)
EXPORT_CHUNK = 2_000


def record_to_json(r: RequestRecord) -> dict[str, Any]:
    """One request as exported: times in seconds since the run start."""
    d = record_to_json_lean(r)
    d["chunk_times_s"] = [t / 1e9 for t in r.chunk_times_ns]
    d["chunk_tokens"] = list(r.chunk_tokens)
    return d


def run_to_json(run: Run) -> dict[str, Any]:
    """The ``run`` object of an export."""
    return {
        "id": run.id,
        "kind": run.kind.value,
        "status": run.status.value,
        "tool_version": run.tool_version,
        "started_at": run.started_at,
        "target": asdict(run.target),
        "seed": run.seed,
        "profile": run.profile,
        "sweep_id": run.sweep_id,
        "probe": run.probe,
        "settings": run.settings,
        "host": run.host,
    }


def clean_json(obj: Any) -> Any:
    """JSON has no infinities or NaN: write them as null (the summary says which values are undefined)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_json(v) for v in obj]
    return obj


def build_export(run: Run, summary: dict[str, Any], records: list[RequestRecord]) -> dict[str, Any]:
    """The whole export document."""
    doc: dict[str, Any] = clean_json(
        {
            "run": run_to_json(run),
            "summary": summary,
            "requests": [record_to_json(r) for r in sorted(records, key=lambda r: r.id)],
        }
    )
    return doc


def _orjson_default(obj: Any) -> Any:
    # what json.dumps accepts and orjson does not by default: float/int subclasses and other sequences
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, list | tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _dumps(obj: Any) -> bytes:
    # orjson writes NaN and ±inf as null, as clean_json does for json.dumps
    return orjson.dumps(obj, default=_orjson_default, option=_OPTS)


def _times_s(records: list[RequestRecord]) -> Sequence[np.ndarray | list[float]]:
    """Each record's chunk times in seconds: ``t / 1e9`` per value, as :func:`record_to_json` computes it, but
    converted in one NumPy pass (int64 → float64 then ÷ 1e9 is what Python's ``int / float`` does for |t| < 2**53;
    anything else — floats, huge values — takes the per-value path)."""
    lengths = [len(r.chunk_times_ns) for r in records]
    total = sum(lengths)
    try:
        flat = np.fromiter(chain.from_iterable(r.chunk_times_ns for r in records), dtype=np.int64, count=total)
    except (OverflowError, TypeError, ValueError):
        return [[t / 1e9 for t in r.chunk_times_ns] for r in records]
    if total and (max(-int(flat.min()), int(flat.max())) >= 2**53 or not _all_int(records)):  # no |flat| copy
        return [[t / 1e9 for t in r.chunk_times_ns] for r in records]
    secs = flat / 1e9
    out: list[np.ndarray | list[float]] = []
    at = 0
    for n in lengths:
        out.append(secs[at : at + n])
        at += n
    return out


def _all_int(records: list[RequestRecord]) -> bool:
    # np.fromiter(dtype=int64) truncates floats silently: only exact int times take the NumPy path
    return all(type(t) is int for r in records for t in r.chunk_times_ns[:1]) and all(
        type(t) is int for r in records for t in r.chunk_times_ns[-1:]
    )


def export_chunks(
    run: Run, summary: dict[str, Any], records: list[RequestRecord], chunk_times: ChunkTimes | None = None
) -> Iterator[bytes]:
    """The export document as compact JSON, streamed in chunks (``b"".join`` of them is the whole document).

    The same document as :func:`build_export` (a test compares them value by value), written with orjson a few
    thousand requests at a time: the whole text is never held at once, and a 10,000-request simulation's export takes
    a fraction of a second instead of ~10 s. ``chunk_times``: ``records``' chunk times already flattened, in their
    order (:func:`~tailscope.metrics.chunk_times.flatten`): converted to seconds in one pass, not flattened again.
    """
    ids = list(map(attrgetter("id"), records))
    order = sorted(range(len(records)), key=ids.__getitem__)  # the same stable order as sorting by ``r.id``
    ordered = [records[i] for i in order]
    secs_all: list[np.ndarray] | None = None
    if chunk_times is not None:
        all_s = chunk_times.flat / 1e9  # as _times_s converts them, all at once
        bounds = np.cumsum(chunk_times.lengths).tolist()
        starts = [0, *bounds[:-1]]
        secs_all = [all_s[starts[i] : bounds[i]] for i in order]
    head = _dumps({"run": run_to_json(run), "summary": summary})
    yield head[:-1] + b',"requests":['
    for start in range(0, len(ordered), EXPORT_CHUNK):
        part = ordered[start : start + EXPORT_CHUNK]
        times = _times_s(part) if secs_all is None else secs_all[start : start + EXPORT_CHUNK]
        docs = []
        for r, r_s in zip(part, times, strict=True):
            d = record_to_json_lean(r)
            d["chunk_times_s"] = r_s
            d["chunk_tokens"] = r.chunk_tokens
            docs.append(d)
        body = _dumps(docs)[1:-1]
        yield (b"," if start else b"") + body
    yield b"]}"


#: an enum member's value by member: a dict lookup, where ``member.value`` goes through Enum's descriptor (≈ 1 µs)
_VALUE: dict[Any, str] = {m: m.value for kind in (Status, TokensSource, ErrorClass) for m in kind}


def record_to_json_lean(r: RequestRecord) -> dict[str, Any]:
    """:func:`record_to_json` without the two chunk arrays (filled in by the caller, same key order)."""
    # the ns → s / ms conversions written out (``_s``/``_ms``'s expression): one call per record, not eight
    sent, first, end, stream_end = r.sent_ns, r.first_token_ns, r.end_ns, r.stream_end_ns
    first_event, answer, dns, connect, tls = r.first_event_ns, r.first_answer_ns, r.dns_ns, r.connect_ns, r.tls_ns
    return {
        "id": r.id,
        "class": r.request_class,
        "session": r.session_id,
        "turn": r.turn,
        "scheduled_s": None if r.scheduled_ns is None else r.scheduled_ns / 1e9,
        "sent_s": None if sent is None else sent / 1e9,
        "first_token_s": None if first is None else first / 1e9,
        "end_s": None if end is None else end / 1e9,
        "stream_end_s": None if stream_end is None else stream_end / 1e9,
        "first_event_s": None if first_event is None else first_event / 1e9,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "tokens_source": _VALUE[r.tokens_source],
        "status": _VALUE[r.status],
        "error": _VALUE[r.error] if r.error else None,
        "error_detail": r.error_detail,
        "http_status": r.http_status,
        "server_request_id": r.server_request_id,
        "warmup": r.warmup,
        "shared_prefix": r.shared_prefix,
        "worker": r.worker,
        "trace_id": r.trace_id,
        "span_id": r.span_id,
        "first_answer_s": None if answer is None else answer / 1e9,
        "reasoning_tokens": r.reasoning_tokens,
        "cached_tokens": r.cached_tokens,
        "connection_reused": r.connection_reused,
        "dns_ms": None if dns is None else dns / 1e6,
        "connect_ms": None if connect is None else connect / 1e6,
        "tls_ms": None if tls is None else tls / 1e6,
        "step": r.step,
        "depends_on": list(r.depends_on),
        "session_calls": r.session_calls,
    }
