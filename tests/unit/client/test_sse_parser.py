"""SSE parser: exact events whatever the chunk boundaries and line endings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.client.sse import SSEEvent, SSEParser
from tailscope.errors import SSEError


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(p.feed(c))
    out.extend(p.close())
    return out


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(data[prev:p])
        prev = p
    pieces.append(data[prev:])
    return pieces


STREAM = (
    b": keep-alive comment\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\r\n\r\n'
    b"event: update\r"
    b"data: line one\r"
    b"data: line two\r\r"
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
    b"data:[DONE]\n\n"
)
EXPECTED = [
    SSEEvent('{"choices":[{"delta":{"role":"assistant","content":""}}]}'),
    SSEEvent('{"choices":[{"delta":{"content":"Hel"}}]}'),
    SSEEvent("line one\nline two", event="update"),
    SSEEvent('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}'),
    SSEEvent("[DONE]"),
]


def test_whole_stream() -> None:
    assert parse_all([STREAM]) == EXPECTED


def test_byte_by_byte() -> None:
    assert parse_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_any_chunk_boundaries(cuts: list[int]) -> None:
    assert parse_all(split_at(STREAM, cuts)) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=20),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=500), max_size=10),
)
def test_multiline_data_roundtrip(lines: list[str], eol: bytes, cuts: list[int]) -> None:
    raw = b"".join(b"data: " + ln.encode() + eol for ln in lines) + eol
    events = parse_all(split_at(raw, cuts))
    assert events == [SSEEvent("\n".join(lines))]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\n\r") == []
    assert p.feed(b"\n") == [SSEEvent("a")]


def test_field_without_space_and_unknown_fields() -> None:
    assert parse_all([b"data:x\nfoo: bar\nid: 7\n\n"]) == [SSEEvent("x", id="7")]


def test_comment_only_dispatches_nothing() -> None:
    assert parse_all([b": ping\n\n: ping\n\n"]) == []


def test_invalid_utf8_is_an_sse_error() -> None:
    p = SSEParser()
    with pytest.raises(SSEError, match="invalid UTF-8"):
        p.feed(b"data: \xff\xfe\n\n")


def test_endless_line_is_bounded() -> None:
    p = SSEParser(max_line_bytes=1000)
    with pytest.raises(SSEError, match="exceeded 1000 bytes"):
        p.feed(b"data: " + b"x" * 2000)


def parse_data(chunks: list[bytes]) -> list[bytes]:
    p = SSEParser()
    out: list[bytes] = []
    for c in chunks:
        out.extend(p.feed_data(c))
    out.extend(p.close_data())
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_fast_path_matches_full_parser(cuts: list[int]) -> None:
    assert parse_data(split_at(STREAM, cuts)) == [e.data.encode() for e in EXPECTED]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_fast_path_never_crashes_and_agrees_on_arbitrary_bytes(raw: bytes, cuts: list[int]) -> None:
    try:
        full = [e.data.encode() for e in parse_all(split_at(raw, cuts))]
    except SSEError:
        return  # invalid UTF-8: the fast path leaves validation to the JSON parser
    assert parse_data(split_at(raw, cuts)) == full


@pytest.mark.parametrize(
    "chunk",
    [
        b"data: \n\n",
        b"data: {}\n\n",
        b"data: a\nb\n\n",
        b"data: a\n\ndata: b\n\n",
        b"data: a\rb\n\n",
        b"data:a\n\n",
        b"data: a\n",
        b"data: a\n\n\n",
        b"event: x\ndata: a\n\n",
    ],
)
def test_one_read_fast_path_agrees_with_the_full_parser(chunk: bytes) -> None:
    """The single-event shortcut takes only ``data: …\\n\\n`` with no other line end inside; every shape near it gives
    what the full parser gives."""
    assert parse_data([chunk]) == [e.data.encode() for e in parse_all([chunk])]
