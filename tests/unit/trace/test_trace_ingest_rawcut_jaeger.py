"""Cutting a Jaeger query-API document's trace list from its bytes: the same rows and problems as parsing it whole
and as the earlier parse-then-re-encode cut, whatever the strings hold; a damaged slice reads the file whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_ingest_pieces import whole_and_pieces

from tailscope.store.spans import SpanStore
from tailscope.trace.ingest import pieces, rawcut
from tailscope.trace.ingest.common import ParseContext
from tailscope.trace.ingest.sets import ingest_paths

TRICKY = [
    'a "quoted" ] } [ { , value',  # brackets and commas inside a string
    "ends with a backslash \\",
    '\\"data\\": [1, 2]',  # what looks like the trace list, inside a string
    '"data":[',
    "unicode é ✓ \u2028 日本",
]


def _trace(t: int, spans: int = 4) -> dict[str, Any]:
    tid = f"{t:032x}"
    out = []
    for k in range(spans):
        sp: dict[str, Any] = {
            "traceID": tid,
            "spanID": f"{t:08x}{k:08x}",
            "operationName": f"op {TRICKY[k % len(TRICKY)]}",
            "startTime": 1_700_000_000_000_000 + t * 1000 + k,
            "duration": 100 + k,
            "processID": f"p{k % 2 + 1}",
            "tags": [
                {"key": "span.kind", "type": "string", "value": "server" if k == 0 else "client"},
                {"key": "n", "type": "int64", "value": str(k)},
                {"key": TRICKY[(t + k) % len(TRICKY)], "type": "string", "value": TRICKY[k % len(TRICKY)]},
            ],
        }
        if k:
            ref = "FOLLOWS_FROM" if k == 3 else "CHILD_OF"
            sp["references"] = [{"refType": ref, "traceID": tid, "spanID": f"{t:08x}{0:08x}"}]
        if k == 2:
            sp["tags"].append({"key": "error", "type": "bool", "value": True})
        out.append(sp)
    procs = {"p1": {"serviceName": f"svc-{TRICKY[t % len(TRICKY)]}"}, "p2": {"serviceName": "db ✓"}}
    return {"traceID": tid, "spans": out, "processes": procs}


def _doc(n: int = 12) -> dict[str, Any]:
    traces: list[Any] = [_trace(t) for t in range(n)]
    del traces[1]["processes"]  # no processes map: the services are empty
    traces[2]["processes"].pop("p2")  # a processID missing from the map
    traces[3]["spans"][1]["process"] = {"serviceName": "inline"}  # an inline process wins
    traces[4]["spans"].append("not a span")
    traces.insert(5, "not a trace")
    traces[6]["spans"][2]["references"].append({"refType": "FOLLOWS_FROM", "traceID": "ab", "spanID": "cd"})
    del traces[7]["spans"][0]["traceID"]  # the trace's id stands in
    return {"data": traces, "total": 0, "limit": 0, "offset": 0, "errors": None}


def _kinds(path: Path, parts: int = 3, fmt: str = "auto") -> set[str]:
    return {p.kind for p in pieces.split_file(str(path), fmt, parts, ParseContext(source=str(path)))}


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize(("parts", "fmt"), [(2, "auto"), (5, "auto"), (3, "jaeger")])
def test_tricky_traces_cut_like_the_whole_document_and_the_old_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None, parts: int, fmt: str
) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    p = tmp_path / "d.json"
    p.write_text(json.dumps(_doc(), indent=indent, ensure_ascii=False))
    assert _kinds(p, parts, fmt) == {"jaeger-raw"}
    whole, rows, whole_problems, problems, n = whole_and_pieces(p, parts, fmt)
    assert n > 1
    assert rows == whole
    assert problems == whole_problems
    assert any(r["follows_from"] for r in rows)
    assert any(r["links"] for r in rows)
    monkeypatch.setattr(pieces, "looks_like_jaeger", lambda raw: False)  # the earlier cut: parse, re-encode
    assert _kinds(p, parts, fmt) == {"jaeger"}
    _, old_rows, _, old_problems, _ = whole_and_pieces(p, parts, fmt)
    assert rows == old_rows
    assert problems == old_problems


def test_small_chunks_and_odd_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(rawcut, "CHUNK", 7)  # chunk edges fall inside strings, escapes and numbers
    p = tmp_path / "d.json"
    p.write_text(json.dumps(_doc(9)))
    whole, rows, whole_problems, problems, _ = whole_and_pieces(p, 3)
    assert _kinds(p) == {"jaeger-raw"}
    assert (rows, problems) == (whole, whole_problems)
    p.write_text('{"data": [ ]}')
    assert _kinds(p) == set()  # nothing to parse, as before
    text = json.dumps(_doc(9))
    p.write_text(text[:-2])  # unbalanced: one piece, salvaged by the reader
    assert _kinds(p) == {"file"}
    p.write_text('{"data": [], ' + text[1:])  # a duplicate key: parsed here, the last one wins as in json
    assert _kinds(p) == {"jaeger"}
    p.write_text(json.dumps({"data": {"x": 1}}))  # not a list: reported once, by the ordinary path
    ctx = ParseContext(source=str(p))
    assert list(pieces.split_file(str(p), "auto", 3, ctx)) == []
    assert [x.message for x in ctx.problems] == ["expected a list of traces"]
    p.write_text(json.dumps({"result": {"resourceSpans": []}, "data": [_trace(1)]}))  # OTLP wins, as before
    assert "jaeger-raw" not in _kinds(p)
    assert rawcut.trace_array(b'{"x": {"data": [1, 2]}}') is None  # not the top-level object's list


@pytest.mark.parametrize("workers", [1, 2])
def test_a_damaged_slice_reads_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    text = json.dumps(_doc(10))
    cut = text.index('"operationName"', len(text) * 2 // 3)
    p = tmp_path / "d.json"
    p.write_text(text[:cut] + '"operationName": , ' + text[cut:])  # brackets still balance
    assert _kinds(p) == {"jaeger-raw"}
    whole_ctx = ParseContext(source=str(p))
    whole = list(pieces.piece_rows(pieces.Piece(str(p), "auto"), whole_ctx))
    assert whole_ctx.problems
    store = SpanStore(tmp_path / "s.duckdb")
    report = ingest_paths(store, "s", [p], workers=workers)
    assert report.spans == len(whole)
    assert [str(x) for x in report.problems] == [str(x) for x in whole_ctx.problems]


def test_stored_spans_equal_the_old_cut_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    p = tmp_path / "d.json"
    p.write_text(json.dumps(_doc(40), ensure_ascii=False))
    store = SpanStore(tmp_path / "s.duckdb")
    new = ingest_paths(store, "new", [p], workers=2)
    monkeypatch.setattr(pieces, "looks_like_jaeger", lambda raw: False)
    old = ingest_paths(store, "old", [p], workers=2)
    assert new.spans == old.spans > 100
    assert [str(x) for x in new.problems] == [str(x) for x in old.problems]
    with store.db.read() as con:
        for a, b in (("new", "old"), ("old", "new")):
            sql = "SELECT * EXCLUDE (set_name) FROM spans WHERE set_name = ?"
            assert con.execute(f"{sql} EXCEPT ALL {sql}", [a, b]).fetchall() == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet='"\\[]{},: ab\n', max_size=12), min_size=1, max_size=4), st.integers(2, 4))
def test_any_string_values_cut_like_the_whole_document(tmp_path_factory: Any, values: list[str], parts: int) -> None:
    pieces.SPLIT_MIN_BYTES, saved = 0, pieces.SPLIT_MIN_BYTES
    try:
        doc = _doc(8)
        for k, v in enumerate(values):
            trace = doc["data"][k % 4]
            trace["spans"][0]["tags"].append({"key": v, "type": "string", "value": v})
            trace["processes"] = {**trace.get("processes", {}), "p1": {"serviceName": v}}
        p = tmp_path_factory.mktemp("s") / "d.json"
        p.write_text(json.dumps(doc))
        whole, rows, whole_problems, problems, _ = whole_and_pieces(p, parts)
        kinds = _kinds(p, parts)
    finally:
        pieces.SPLIT_MIN_BYTES = saved
    assert kinds == {"jaeger-raw"}
    assert rows == whole
    assert problems == whole_problems
