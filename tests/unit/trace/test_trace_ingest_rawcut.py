"""Cutting an OTLP JSON document's span arrays from its bytes: the same rows and problems as parsing it whole, whatever
the strings hold, and a damaged slice sends the file back to the ordinary reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_ingest_pieces import whole_and_pieces

from tailscope.store.spans import SpanStore
from tailscope.trace.demo import demo_traces, to_otlp_json
from tailscope.trace.ingest import pieces, rawcut
from tailscope.trace.ingest.common import ParseContext
from tailscope.trace.ingest.sets import ingest_paths


def _doc(n: int = 20, **attrs: Any) -> dict[str, Any]:
    doc = to_otlp_json([s for t in demo_traces(n) for s in t])
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for k, v in attrs.items():
        spans[1]["attributes"].append({"key": k, "value": {"stringValue": v}})
    return doc


def _kinds(path: Path, parts: int = 3) -> set[str]:
    return {p.kind for p in pieces.split_file(str(path), "auto", parts, ParseContext(source=str(path)))}


TRICKY = [
    'a "quoted" ] } [ { , value',  # brackets and commas inside a string
    "ends with a backslash \\",  # an escaped backslash before the closing quote
    '\\"spans\\": [1, 2, 3]',  # what looks like a span array, inside a string
    '"spans":[',
    "unicode é ✓ \u2028",
]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("parts", [2, 5])
def test_tricky_strings_cut_like_the_whole_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None, parts: int
) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    doc = _doc(**{f"k{i}": v for i, v in enumerate(TRICKY)})
    doc["resourceSpans"].append({"resource": {}, "scopeSpans": [{"spans": []}, {"scope": {"name": "x"}}]})
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=False))
    whole, rows, whole_problems, problems, n = whole_and_pieces(p, parts)
    assert _kinds(p, parts) == {"otlp-raw"}
    assert n > 1
    assert rows == whole
    assert problems == whole_problems


def test_small_chunks_carry_strings_and_depth_across(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(rawcut, "CHUNK", 7)  # chunk edges fall inside strings, escapes and numbers
    p = tmp_path / "d.json"
    p.write_text(json.dumps(_doc(5, a='x \\" ] y', b="\\\\")))
    whole, rows, whole_problems, problems, _ = whole_and_pieces(p, 3)
    assert _kinds(p) == {"otlp-raw"}
    assert rows == whole
    assert problems == whole_problems


def test_other_shapes_are_parsed_whole_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    p = tmp_path / "v3.json"
    p.write_text(json.dumps({"result": _doc(5)}))
    assert _kinds(p) == {"otlp"}  # the span arrays lie deeper: parsed and re-encoded
    p.write_text(json.dumps(_doc(5))[:-3])  # unbalanced: one piece, salvaged by the reader
    assert _kinds(p) == {"file"}
    assert rawcut.span_arrays(b'{"resourceSpans": []}') is None


@pytest.mark.parametrize("workers", [1, 2])
def test_a_damaged_slice_reads_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    text = json.dumps(_doc(10))
    cut = text.index('"name"', len(text) * 2 // 3)
    p = tmp_path / "d.json"
    p.write_text(text[:cut] + '"name": , ' + text[cut:])  # brackets still balance; invalid JSON inside a span
    assert _kinds(p) == {"otlp-raw"}
    whole_ctx = ParseContext(source=str(p))
    whole = list(pieces.piece_rows(pieces.Piece(str(p), "auto"), whole_ctx))
    assert whole_ctx.problems  # the reader reports the damage and salvages what precedes it
    read = []
    for piece in pieces.split_file(str(p), "auto", 3, ParseContext(source=str(p))):
        try:
            read.append(len(list(pieces.piece_rows(piece, ParseContext(source=str(p))))))
        except pieces.DamagedPiece:
            read.append(-1)
    assert read.count(-1) == 1  # the piece with the damage; the others parse

    store = SpanStore(tmp_path / "s.duckdb")
    report = ingest_paths(store, "s", [p], workers=workers)
    assert report.spans == len(whole)
    assert [str(x) for x in report.problems] == [str(x) for x in whole_ctx.problems]
    assert store.span_count("s") == len({(r["trace_id"], r["span_id"]) for r in whole})
    assert not list(tmp_path.glob("**/*-whole.*.json"))  # batch files cleaned up


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet='"\\[]{},: ab\n', max_size=12), min_size=1, max_size=4), st.integers(2, 4))
def test_any_string_values_cut_like_the_whole_document(tmp_path_factory: Any, values: list[str], parts: int) -> None:
    pieces.SPLIT_MIN_BYTES, saved = 0, pieces.SPLIT_MIN_BYTES
    try:
        p = tmp_path_factory.mktemp("s") / "d.json"
        p.write_text(json.dumps(_doc(3, **{f"k{i}": v for i, v in enumerate(values)})))
        whole, rows, whole_problems, problems, _ = whole_and_pieces(p, parts)
        kinds = _kinds(p, parts)
    finally:
        pieces.SPLIT_MIN_BYTES = saved
    assert kinds == {"otlp-raw"}
    assert rows == whole
    assert problems == whole_problems
