"""Hand-built spans for trace tests."""

from __future__ import annotations

from typing import Any

from tailscope.records import Span


def span(
    sid: str,
    parent: str | None,
    start: int,
    end: int,
    name: str | None = None,
    *,
    trace: str = "t1",
    service: str = "svc",
    kind: str = "INTERNAL",
    status: str = "UNSET",
    layer: str = "other",
    follows_from: bool = False,
    attributes: dict[str, Any] | None = None,
) -> Span:
    """A span with integer times (ns)."""
    return Span(
        trace_id=trace,
        span_id=sid,
        parent_id=parent,
        name=name or sid,
        start_ns=start,
        end_ns=end,
        service=service,
        kind=kind,
        status=status,
        attributes=attributes or {},
        layer=layer,
        follows_from=follows_from,
    )
