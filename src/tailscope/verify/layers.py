"""Dependency (layer) contracts on trace sets: how much time each layer adds to a request.

The sample of a layer, per trace that touches it, is the layer's exclusive time on the trace's critical path (the
``path_layer`` of :class:`tailscope.trace.facts.TraceFacts`): the time the request actually waited on that layer,
children of other layers excluded. ``{layer: gateway, percentile: p99, max_ms: 50}`` therefore reads "the gateway adds
at most 50 ms to 99 % of the requests that pass through it" — a gateway SERVER span that wraps the whole request does
not count the model's time as gateway time. Traces where the layer is absent from the critical path give no sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tailscope.errors import ContractError
from tailscope.records import Span
from tailscope.trace.facts import TraceFacts, trace_facts
from tailscope.trace.tree import build_tree, group_by_trace


def layer_samples_from_facts(facts: Iterable[TraceFacts]) -> dict[str, np.ndarray]:
    """Per layer, the critical-path ms of every trace that spends time in it."""
    out: dict[str, list[float]] = {}
    for f in facts:
        for layer, ns in f.path_layer.items():
            if ns > 0:
                out.setdefault(layer, []).append(ns / 1e6)
    return {k: np.asarray(v, dtype=np.float64) for k, v in sorted(out.items())}


def layer_samples_from_spans(spans: Iterable[Span]) -> dict[str, np.ndarray]:
    """Layer samples of classified spans (``Span.layer``), grouped into traces."""
    traces = group_by_trace(list(spans))
    return layer_samples_from_facts(trace_facts(build_tree(t)) for t in traces.values())


def layer_samples_from_pairs(pairs: Iterable[tuple[str, float]]) -> dict[str, np.ndarray]:
    """Layer samples from plain ``(layer, ms)`` pairs (samples measured elsewhere)."""
    out: dict[str, list[float]] = {}
    for layer, ms in pairs:
        out.setdefault(layer, []).append(float(ms))
    return {k: np.asarray(v, dtype=np.float64) for k, v in sorted(out.items())}


def layer_samples_from_json(doc: Any, *, source: str = "<spans>") -> dict[str, np.ndarray]:
    """Layer samples from JSON: ``{"layers": {LAYER: [ms, …]}}`` (precomputed) or a list of spans
    ``{trace_id, span_id, parent_id, name, layer, start_ns, end_ns, kind?}`` (also under ``{"spans": […]}``).

    Raises:
        ContractError: naming the source and the entry that is malformed.
    """
    if isinstance(doc, Mapping) and isinstance(doc.get("layers"), Mapping):
        try:
            return layer_samples_from_pairs((str(k), float(x)) for k, v in doc["layers"].items() for x in v)
        except (TypeError, ValueError):
            raise ContractError(f"{source}: layers: expected LAYER: [milliseconds, …]") from None
    rows = doc.get("spans") if isinstance(doc, Mapping) else doc
    if not isinstance(rows, Sequence) or isinstance(rows, str):
        raise ContractError(f"{source}: expected a list of spans or {{'layers': {{LAYER: [ms, …]}}}}")
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
                    kind=str(r.get("kind", "INTERNAL")),
                    layer=str(r.get("layer", "other")),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ContractError(
                f"{source}: spans[{i}]: expected {{trace_id, span_id, parent_id, name, layer, start_ns, end_ns}}"
            ) from None
    return layer_samples_from_spans(spans)
