"""The export document: run, summary and per-request records as JSON-ready dicts (key names are a stable interface).

Pure: builds dicts (the command line writes them with :func:`tailscope.cli.common.write_export`). Times of requests
are in seconds since the run start here (nanoseconds in the store and in Parquet/CSV exports); docs/metrics.md has the
layout.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from tailscope.records import RequestRecord, Run


def _s(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def record_to_json(r: RequestRecord) -> dict[str, Any]:
    """One request as exported: times in seconds since the run start."""
    return {
        "id": r.id,
        "class": r.request_class,
        "session": r.session_id,
        "turn": r.turn,
        "scheduled_s": _s(r.scheduled_ns),
        "sent_s": _s(r.sent_ns),
        "first_token_s": _s(r.first_token_ns),
        "end_s": _s(r.end_ns),
        "stream_end_s": _s(r.stream_end_ns),
        "first_event_s": _s(r.first_event_ns),
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "requested_output_tokens": r.requested_output_tokens,
        "tokens_source": r.tokens_source.value,
        "status": r.status.value,
        "error": r.error.value if r.error else None,
        "error_detail": r.error_detail,
        "http_status": r.http_status,
        "server_request_id": r.server_request_id,
        "warmup": r.warmup,
        "shared_prefix": r.shared_prefix,
        "worker": r.worker,
        "trace_id": r.trace_id,
        "span_id": r.span_id,
        "first_answer_s": _s(r.first_answer_ns),
        "reasoning_tokens": r.reasoning_tokens,
        "cached_tokens": r.cached_tokens,
        "connection_reused": r.connection_reused,
        "dns_ms": _ms(r.dns_ns),
        "connect_ms": _ms(r.connect_ns),
        "tls_ms": _ms(r.tls_ns),
        "chunk_times_s": [t / 1e9 for t in r.chunk_times_ns],
        "chunk_tokens": list(r.chunk_tokens),
    }


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
