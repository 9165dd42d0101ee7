"""Spans in the DuckDB store: bulk write, idempotent re-ingest, streaming by trace, partitions, lookup by prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_helpers import span

from tailscope.errors import NotFoundError
from tailscope.store.spans import SpanStore
from tailscope.trace.ingest.sets import set_facts


def test_write_read_and_reingest_is_idempotent(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    spans = [
        span("r", None, 0, 100, "root", trace="aa01"),
        span("c", "r", 10, 20, "child", trace="aa01", attributes={"http.request.resend_count": 2, "k": [1, "x"]}),
        span("r", None, 0, 50, "root", trace="bb02"),
    ]
    assert store.write("before", spans) == 3
    assert store.write("before", spans[:1]) == 1
    info = store.get_set("before")
    assert (info.spans, info.traces) == (3, 2)
    traces = list(store.iter_traces("before"))
    assert [len(t) for t in traces] == [2, 1]
    child = next(s for s in traces[0] if s.span_id == "c")
    assert child.attributes == {"http.request.resend_count": 2}
    set_name, full = store.load_trace(None, "aa")
    assert set_name == "before"
    assert next(s for s in full if s.span_id == "c").attributes == {"http.request.resend_count": 2, "k": [1, "x"]}
    parts = [list(store.iter_traces("before", partition=(k, 2))) for k in range(2)]
    assert sorted(t[0].trace_id for p in parts for t in p) == ["aa01", "bb02"]
    assert len(set_facts(store, "before", workers=1)) == 2


def test_missing_set_and_trace_are_clear_errors(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    assert store.list_sets() == []
    with pytest.raises(NotFoundError, match="no trace sets yet"):
        store.load_trace(None, "ab")
    store.write("a", [span("r", None, 0, 1, trace="ab12"), span("r", None, 0, 1, trace="ab34")])
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.load_trace("a", "ab")
    with pytest.raises(NotFoundError, match="sets: a"):
        store.get_set("nope")
    store.delete_set("a")
    assert store.list_sets() == []


def test_values_orjson_cannot_encode_are_stored_not_lost(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    odd = {"big": 2**70, "lone": "a\ud800b", "nested": [-(2**64), {"x": "\udfff"}], "http.request.resend_count": 2**40}
    assert store.write("odd", [span("r", None, 0, 10, "root", trace="cc03", attributes=odd)]) == 1
    _, [got] = store.load_trace("odd", "cc03")
    assert got.attributes["big"] == str(2**70)
    assert got.attributes["lone"] == "a?b"  # the lone surrogate replaced (store.bounds.json_safe)
    assert got.attributes["nested"] == [str(-(2**64)), {"x": "?"}]
    [[row]] = list(store.iter_trace_rows("odd"))
    assert row[11] is None  # a resend count beyond the INTEGER column is not a resend count
