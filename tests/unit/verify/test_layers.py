"""Layer samples: the critical-path time each layer adds to a trace."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.errors import ContractError
from tailscope.verify.layers import layer_samples_from_json

MS = 1_000_000


def _trace(tid: str, retrieval_ms: int) -> list[dict[str, object]]:
    """gateway SERVER span wrapping retrieval then inference, sequential; gateway's own time 5 ms."""
    return [
        {"trace_id": tid, "span_id": "g", "parent_id": None, "name": "POST /chat", "kind": "SERVER",
         "layer": "gateway", "start_ns": 0, "end_ns": (5 + retrieval_ms + 300) * MS},
        {"trace_id": tid, "span_id": "r", "parent_id": "g", "name": "search", "layer": "retrieval",
         "start_ns": 5 * MS, "end_ns": (5 + retrieval_ms) * MS},
        {"trace_id": tid, "span_id": "i", "parent_id": "g", "name": "chat", "layer": "inference",
         "start_ns": (5 + retrieval_ms) * MS, "end_ns": (5 + retrieval_ms + 300) * MS},
    ]  # fmt: skip


def test_layer_time_is_exclusive_critical_path_time() -> None:
    spans = [s for k in range(10) for s in _trace(f"t{k}", retrieval_ms=20 * (k + 1))]
    samples = layer_samples_from_json(spans, source="s.json")
    np.testing.assert_allclose(np.sort(samples["retrieval"]), 20.0 * np.arange(1, 11))
    np.testing.assert_allclose(samples["inference"], 300.0)
    np.testing.assert_allclose(samples["gateway"], 5.0)  # the wrapper's own time, not the whole request


def test_precomputed_and_errors() -> None:
    got = layer_samples_from_json({"layers": {"db": [1, 2.5]}})
    np.testing.assert_allclose(got["db"], [1.0, 2.5])
    with pytest.raises(ContractError, match=r"s\.json: spans\[0\]"):
        layer_samples_from_json([{"layer": "x"}], source="s.json")
    with pytest.raises(ContractError, match="expected a list of spans"):
        layer_samples_from_json({"nope": 1}, source="s.json")
