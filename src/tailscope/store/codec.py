"""Conversion between result records and store rows / JSON-lines batch files."""

from __future__ import annotations

import json
from typing import Any

from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status, TokensSource
from tailscope.store.db import REQUEST_COLUMNS

_REQUEST_FIELDS = tuple(name for name, _ in REQUEST_COLUMNS if name != "run_id")


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
