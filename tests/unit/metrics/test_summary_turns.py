"""Per-turn and shared-vs-unshared-prefix summaries on hand-made records (exact oracles)."""

from __future__ import annotations

import json

import pytest

from tailscope.metrics.summary import summarize
from tailscope.records import ErrorClass, RequestRecord, Status

MS = 1_000_000


def rec(
    i: int,
    ttft_ms: float,
    e2e_ms: float,
    *,
    session: str | None = None,
    turn: int | None = None,
    shared: bool = False,
    ok: bool = True,
    warmup: bool = False,
) -> RequestRecord:
    start = i * 1000 * MS
    first = start + int(ttft_ms * MS)
    end = start + int(e2e_ms * MS)
    return RequestRecord(
        id=i,
        scheduled_ns=start,
        sent_ns=start,
        first_token_ns=first if ok else None,
        end_ns=end,
        status=Status.OK if ok else Status.ERROR,
        error=None if ok else ErrorClass.HTTP_5XX,
        session_id=session,
        turn=turn,
        shared_prefix=shared,
        warmup=warmup,
        chunk_times_ns=(first, end) if ok else (),
        chunk_tokens=(1, 1) if ok else (),
        output_tokens=2 if ok else None,
    )


def test_ttft_by_turn_number() -> None:
    records = [
        rec(0, 10, 50, session="a", turn=0),
        rec(1, 20, 60, session="a", turn=1),
        rec(2, 40, 90, session="a", turn=2),
        rec(3, 30, 70, session="b", turn=0),
        rec(4, 60, 100, session="b", turn=1),
        rec(5, 5, 10),  # not in a session
        rec(6, 999, 1999, session="c", turn=0, ok=False),  # failed: not in the latency groups
        rec(7, 999, 1999, session="c", turn=3, warmup=True),  # warmup: excluded
    ]
    s = summarize(records)
    assert sorted(s.turns) == [0, 1, 2]
    assert s.turns[0].count == 2
    assert s.turns[0].ttft_ms.mean == pytest.approx(20.0)
    assert s.turns[0].ttft_ms.max == pytest.approx(30.0)
    assert s.turns[1].ttft_ms.mean == pytest.approx(40.0)
    assert s.turns[1].e2e_ms.mean == pytest.approx(80.0)
    assert s.turns[2].count == 1
    assert s.turns[2].ttft_ms.p50 == pytest.approx(40.0)
    d = s.to_dict()
    assert list(d["turns"]) == ["0", "1", "2"]  # JSON keys are strings, in turn order
    assert d["turns"]["1"] == {
        "ttft_ms": s.turns[1].ttft_ms.to_dict(),
        "e2e_ms": s.turns[1].e2e_ms.to_dict(),
        "count": 2,
    }
    json.dumps(d)


def test_shared_vs_unshared_prefix() -> None:
    records = [rec(i, 10 + i, 50, shared=True) for i in range(4)] + [rec(10 + i, 100, 200) for i in range(3)]
    s = summarize(records)
    assert set(s.shared_prefix) == {"shared", "unshared"}
    assert s.shared_prefix["shared"].count == 4
    assert s.shared_prefix["shared"].ttft_ms.mean == pytest.approx(11.5)
    assert s.shared_prefix["unshared"].count == 3
    assert s.shared_prefix["unshared"].ttft_ms.p99 == pytest.approx(100.0)
    d = s.to_dict()["shared_prefix"]
    assert d["shared"]["count"] == 4
    assert d["unshared"]["e2e_ms"]["mean"] == pytest.approx(200.0)


def test_no_sessions_and_no_prefix_give_empty_groups() -> None:
    s = summarize([rec(i, 10, 20) for i in range(3)])
    assert s.turns == {}
    assert s.shared_prefix == {}
    d = s.to_dict()
    assert d["turns"] == {}
    assert d["shared_prefix"] == {}


def test_per_class_summaries_carry_their_own_turns() -> None:
    records = [
        RequestRecord(**{**_fields(rec(0, 10, 20, session="a", turn=0)), "request_class": "chat"}),
        RequestRecord(**{**_fields(rec(1, 30, 40, session="a", turn=1)), "request_class": "chat"}),
        RequestRecord(**{**_fields(rec(2, 5, 6)), "request_class": "short"}),
    ]
    s = summarize(records)
    assert sorted(s.classes["chat"].turns) == [0, 1]
    assert s.classes["short"].turns == {}


def _fields(r: RequestRecord) -> dict[str, object]:
    return {name: getattr(r, name) for name in r.__slots__}  # type: ignore[attr-defined]
