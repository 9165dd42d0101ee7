"""Spans with values the store cannot hold are skipped or made storable, never failing the whole ingest."""

from __future__ import annotations

import json
from pathlib import Path

from tailscope.store.bounds import json_safe
from tailscope.store.spans import SpanStore, encode_row
from tailscope.trace.ingest.sets import ingest_paths


def _span(i: int, start: int, name: str = "op", attrs: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {
        "traceId": f"{i:032x}",
        "spanId": f"{i:016x}",
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10),
        "attributes": attrs or [],
    }


def test_out_of_range_times_are_skipped_and_odd_text_is_stored(tmp_path: Path) -> None:
    resend = [{"key": "http.request.resend_count", "value": {"intValue": str(2**40)}}]
    spans = [
        _span(1, 1_000),
        _span(2, 2**63),  # beyond BIGINT
        _span(3, 2_000, name="bad \ud800 name"),  # a lone surrogate: orjson refuses it, DuckDB would too
        _span(4, 3_000, attrs=resend),  # beyond INTEGER
        _span(5, 2**64 - 1),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    store = SpanStore(tmp_path / "s.duckdb")
    report = ingest_paths(store, "x", [path])
    assert store.get_set("x").spans == 3
    assert report.problem_count == 2
    assert all("64-bit range" in str(p) for p in report.problems)
    names = sorted(s.name for trace in store.iter_traces("x") for s in trace)
    assert names[0].startswith("bad ")
    names[0].encode("utf-8")


def test_json_safe_keeps_what_it_can() -> None:
    row = {"a": "x\udc00", "n": 2**70, "m": -5, "l": [2**64, 1.5, None, True], "d": {"k": "\ud800"}}
    safe = json_safe(row)
    assert safe["n"] == str(2**70)
    assert safe["m"] == -5
    assert safe["l"] == [str(2**64), 1.5, None, True]
    encode_row(safe).decode("utf-8")
