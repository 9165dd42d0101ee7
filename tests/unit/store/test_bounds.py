"""Bounds: every value the store writes fits its column, and what had to change is counted."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailscope.errors import StoreError
from tailscope.records import Run, RunKind, Target
from tailscope.store.bounds import (
    INT_RANGES,
    MAX_TEXT,
    BoundNotes,
    bound_row,
    check_run,
    request_row_problem,
    sample_row_problem,
)
from tailscope.store.db import REQUEST_COLUMNS, SAMPLE_COLUMNS


def test_integers_beyond_their_column_are_stored_empty_and_counted() -> None:
    notes = BoundNotes()
    row = bound_row(
        {"id": 1, "scheduled_ns": 2**70, "requested_output_tokens": 10**12, "output_tokens": 5, "turn": True},
        REQUEST_COLUMNS,
        notes,
    )
    assert row["id"] == 1
    assert row["scheduled_ns"] is None
    assert row["requested_output_tokens"] is None
    assert row["output_tokens"] == 5
    assert row["turn"] == 1
    assert notes.counts == {"scheduled_ns": 1, "requested_output_tokens": 1}
    lines = notes.lines()
    assert len(lines) == 2
    assert "1000000000000" in lines[0] + lines[1]


def test_text_loses_lone_surrogates_and_is_cut() -> None:
    notes = BoundNotes()
    row = bound_row({"error_detail": "bad \ud800 byte", "session_id": "x" * (MAX_TEXT + 10)}, REQUEST_COLUMNS, notes)
    row["error_detail"].encode("utf-8")  # encodable now
    assert row["error_detail"].startswith("bad ")
    assert len(row["session_id"]) <= MAX_TEXT + 10
    assert row["session_id"].endswith("[cut]")
    assert set(notes.counts) == {"error_detail", "session_id"}


def test_lists_with_an_element_out_of_range_are_stored_empty() -> None:
    notes = BoundNotes()
    row = bound_row({"chunk_tokens": [1, 2**40], "chunk_times_ns": (5, 6)}, REQUEST_COLUMNS, notes)
    assert row["chunk_tokens"] == []
    assert row["chunk_times_ns"] == [5, 6]
    assert notes.counts == {"chunk_tokens": 1}


def test_doubles_keep_nan_and_infinity() -> None:
    notes = BoundNotes()
    row = bound_row({"t_ns": 1, "name": "m", "value": math.nan}, SAMPLE_COLUMNS, notes)
    assert math.isnan(row["value"])
    row = bound_row({"t_ns": 1, "name": "m", "value": 10**400}, SAMPLE_COLUMNS, notes)
    assert row["value"] is None
    assert sample_row_problem(row) == "value missing or not a number"
    assert bound_row({"value": math.inf}, SAMPLE_COLUMNS, BoundNotes())["value"] == math.inf


@given(st.integers())
def test_any_integer_ends_in_range_or_empty(v: int) -> None:
    out = bound_row({"http_status": v, "sent_ns": v}, REQUEST_COLUMNS, BoundNotes())
    for name, kind in (("http_status", "INTEGER"), ("sent_ns", "BIGINT")):
        lo, hi = INT_RANGES[kind]
        assert out[name] is None or lo <= out[name] <= hi


def test_row_problems_name_the_field() -> None:
    ok = {"id": 1, "scheduled_ns": 0, "status": "ok", "error": None, "tokens_source": "usage"}
    assert request_row_problem(ok) is None
    assert "status" in (request_row_problem({**ok, "status": "weird"}) or "")
    assert "id" in (request_row_problem({**ok, "id": None}) or "")
    assert "error" in (request_row_problem({**ok, "error": "nope"}) or "")
    assert "tokens_source" in (request_row_problem({**ok, "tokens_source": None}) or "")


@pytest.mark.parametrize(
    ("run_id", "seed", "match"),
    [("../x", 0, "run id"), ("a/b", 0, "run id"), ("", 0, "run id"), ("ok-1", 2**64, "--seed")],
)
def test_runs_that_cannot_be_stored_are_refused_with_the_value(run_id: str, seed: int, match: str) -> None:
    run = Run(id=run_id, kind=RunKind.BENCH, tool_version="0", started_at="", target=Target("u", "m"), seed=seed)
    with pytest.raises(StoreError, match=match):
        check_run(run)
