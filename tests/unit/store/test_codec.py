"""The writer's record encoding: its fast path gives the bytes, the problem and the notes of the careful one (the row
dict, bounded field by field, then encoded), which is kept here as the oracle for every record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.store.bounds import BoundNotes, bound_row, request_row_problem
from tailscope.store.codec import _storable_as_is, record_to_row, request_line, row_to_record
from tailscope.store.db import REQUEST_COLUMNS


def careful_line(run_id: str, r: RequestRecord, notes: BoundNotes) -> tuple[bytes, str | None]:
    """The oracle: the row as a dict, every value bounded, then encoded."""
    row = bound_row(record_to_row(run_id, r), REQUEST_COLUMNS, notes)
    return orjson.dumps(row) + b"\n", request_row_problem(row)


def answer(i: int, tokens: int = 256) -> RequestRecord:
    """A 256-token streamed answer, as a bench run records it."""
    times = tuple(60_000_000 + 10_000_000 * k + (k * 7919) % 200_000 for k in range(tokens))
    return RequestRecord(
        id=i,
        scheduled_ns=1_000 * i,
        sent_ns=1_000 * i + 40_000,
        first_token_ns=times[0],
        end_ns=times[-1],
        status=Status.OK,
        input_tokens=128,
        output_tokens=tokens,
        requested_output_tokens=tokens,
        chunk_times_ns=times,
        chunk_tokens=(1,) * tokens,
        stream_end_ns=times[-1] + 900,
        first_event_ns=times[0] - 300,
        server_request_id=f"cmpl-{i:08x}",
        connection_reused=True,
    )


def check_same(r: RequestRecord) -> None:
    fast_notes, careful_notes = BoundNotes(), BoundNotes()
    assert request_line("run-1", r, fast_notes) == careful_line("run-1", r, careful_notes)
    assert fast_notes.counts == careful_notes.counts


def test_a_streamed_answer_takes_the_fast_path_and_reads_back_whole() -> None:
    r = answer(7)
    assert _storable_as_is(r)
    check_same(r)
    line, problem = request_line("run-1", r, BoundNotes())
    assert problem is None
    assert line.endswith(b"\n")
    assert row_to_record(orjson.loads(line)) == r


@pytest.mark.parametrize(
    "change",
    [
        {"output_tokens": 2**31},  # beyond INTEGER
        {"scheduled_ns": 2**53 + 1},  # within BIGINT, beyond the fast encoding's check: the careful path stores it
        {"end_ns": 2**63},  # beyond BIGINT
        {"chunk_times_ns": (1, 2**64)},
        {"chunk_times_ns": (1, 2**53 + 1)},
        {"chunk_times_ns": (1, "2")},
        {"chunk_times_ns": (1.0, 2.5)},
        {"chunk_tokens": (1, 2**31)},
        {"chunk_tokens": (2**31, 2**31)},
        {"chunk_tokens": (1, None)},
        {"chunk_tokens": ("1", "1")},
        {"depends_on": [3, 4]},
        {"turn": True},
        {"worker": 1.0},
        {"warmup": 1},
        {"request_class": "caf\ud800"},
        {"request_class": "café"},
        {"error_detail": "x" * 70_000},
        {"server_request_id": 12},
        {"status": "ok"},
        {"error": ErrorClass.TIMEOUT_TOTAL, "status": Status.ERROR},
        {"tokens_source": TokensSource.USAGE},
        {"id": None},
    ],
)
def test_every_value_to_bound_is_stored_as_the_careful_path_stores_it(change: dict[str, Any]) -> None:
    r = replace(answer(3, tokens=4), **change)
    if change == {"status": "ok"}:
        # a plain string where the enum belongs: the careful path's record_to_row needs the enum, as before
        assert not _storable_as_is(r)
        return
    check_same(r)


_INTS = st.one_of(
    st.integers(-5, 5),
    st.integers(-(2**31) - 2, 2**31 + 1),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, 2**63]),
    st.integers(-(2**65), 2**65),
)
_MAYBE_INT = st.one_of(st.none(), _INTS, st.booleans(), st.floats(allow_nan=False, allow_infinity=False))
_TEXT = st.one_of(st.none(), st.text(max_size=8), st.text(alphabet=st.characters(codec="ascii"), max_size=8))
_LIST = st.lists(st.one_of(_INTS, st.floats(allow_nan=False, allow_infinity=False)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    ints=st.tuples(_MAYBE_INT, _MAYBE_INT, _MAYBE_INT, _MAYBE_INT),
    texts=st.tuples(_TEXT, _TEXT),
    times=_LIST,
    tokens=st.one_of(_LIST, st.lists(st.just(1), max_size=6)),
    depends=_LIST,
    flag=st.one_of(st.none(), st.booleans(), st.integers(0, 2)),
)
def test_fast_and_careful_paths_agree_on_any_record(
    ints: tuple[Any, ...], texts: tuple[Any, ...], times: list[Any], tokens: list[Any], depends: list[Any], flag: Any
) -> None:
    r = replace(
        answer(1, tokens=2),
        sent_ns=ints[0],
        output_tokens=ints[1],
        worker=ints[2],
        dns_ns=ints[3],
        session_id=texts[0],
        step=texts[1],
        chunk_times_ns=tuple(times),
        chunk_tokens=tuple(tokens),
        depends_on=tuple(depends),
        connection_reused=flag,
    )
    check_same(r)
