"""Dependency (layer) contracts on trace sets: durations of each layer's calls.

A layer's *call* is a span of that layer whose parent belongs to another layer (or has no parent in the set): nested
spans of the same layer (a retrieval span with a retrieval child) are one call, counted once at its outermost span.
The contract ``{layer: retrieval, percentile: p99.9, max_ms: 200}`` bounds the duration of those calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tailscope.errors import ContractError
from tailscope.records import Span


def layer_samples_from_spans(spans: Iterable[Span]) -> dict[str, np.ndarray]:
    """Call durations (ms) per layer from classified spans (``Span.layer``)."""
    spans = list(spans)
    layer_of = {(s.trace_id, s.span_id): s.layer for s in spans}
    out: dict[str, list[float]] = {}
    for s in spans:
        parent_layer = layer_of.get((s.trace_id, s.parent_id)) if s.parent_id else None
        if parent_layer == s.layer:
            continue
        out.setdefault(s.layer, []).append(s.duration_ns / 1e6)
    return {k: np.asarray(v, dtype=np.float64) for k, v in sorted(out.items())}


def layer_samples_from_pairs(pairs: Iterable[tuple[str, float]]) -> dict[str, np.ndarray]:
    """Call durations (ms) per layer from plain ``(layer, duration_ms)`` samples."""
    out: dict[str, list[float]] = {}
    for layer, ms in pairs:
        out.setdefault(layer, []).append(float(ms))
    return {k: np.asarray(v, dtype=np.float64) for k, v in sorted(out.items())}


def layer_samples_from_json(doc: Any, *, source: str = "<spans>") -> dict[str, np.ndarray]:
    """Layer samples from a JSON document: ``{"layers": {LAYER: [ms, …]}}`` or a list of spans, each either
    ``{layer, duration_ms}`` or ``{trace_id, span_id, parent_id, layer, start_ns, end_ns}``.

    Raises:
        ContractError: naming the source and the entry that is malformed.
    """
    if isinstance(doc, Mapping) and isinstance(doc.get("layers"), Mapping):
        try:
            return {str(k): np.asarray([float(x) for x in v], dtype=np.float64) for k, v in doc["layers"].items()}
        except (TypeError, ValueError):
            raise ContractError(f"{source}: layers: expected LAYER: [duration_ms, …]") from None
    rows = doc.get("spans") if isinstance(doc, Mapping) else doc
    if not isinstance(rows, Sequence):
        raise ContractError(f"{source}: expected a list of spans or {{'layers': {{LAYER: [ms, …]}}}}")
    if all(isinstance(r, Mapping) and "duration_ms" in r for r in rows):
        try:
            return layer_samples_from_pairs((str(r.get("layer", "other")), float(r["duration_ms"])) for r in rows)
        except (TypeError, ValueError):
            raise ContractError(f"{source}: duration_ms must be numbers") from None
    spans: list[Span] = []
    for i, r in enumerate(rows):
        try:
            spans.append(
                Span(
                    trace_id=str(r["trace_id"]),
                    span_id=str(r["span_id"]),
                    parent_id=None if r.get("parent_id") in (None, "") else str(r["parent_id"]),
                    name=str(r.get("name", "")),
                    start_ns=int(r["start_ns"]),
                    end_ns=int(r["end_ns"]),
                    layer=str(r.get("layer", "other")),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise ContractError(
                f"{source}: spans[{i}]: expected {{layer, duration_ms}} or "
                "{trace_id, span_id, parent_id, layer, start_ns, end_ns}"
            ) from None
    return layer_samples_from_spans(spans)
