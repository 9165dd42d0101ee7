"""record_ops: a record's JSON document field by field, nested records by their own documents."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tailscope.metrics.first_wave import FirstWave
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.metrics.reasoning import Reasoning
from tailscope.record_ops import FieldsDocument, record_dict


@dataclass(frozen=True, slots=True)
class _Doc(FieldsDocument):
    n: int
    stats: Stats
    names: tuple[str, ...] = ()


def test_record_dict_converts_nested_records_tuples_and_dicts() -> None:
    d = _Doc(3, compute_stats([1.0, 2.0, 3.0]), ("a", "b"))
    doc = record_dict(d)
    assert doc == {"n": 3, "stats": compute_stats([1.0, 2.0, 3.0]).to_dict(), "names": ["a", "b"]}
    assert list(doc) == ["n", "stats", "names"]
    assert d.to_dict() == doc


def test_fields_document_adds_no_slot() -> None:
    assert FieldsDocument.__slots__ == ()
    with pytest.raises(AttributeError):
        _Doc(1, Stats(0)).__dict__  # noqa: B018 - a slotted record has no instance dict


def test_first_wave_and_reasoning_documents_keep_their_keys() -> None:
    s = compute_stats([5.0, 7.0])
    fw = FirstWave(2, 3, s, s, s, s, s)
    assert fw.to_dict() == {
        "count": 2,
        "rest": 3,
        "send_lag_ms": s.to_dict(),
        "rest_send_lag_ms": s.to_dict(),
        "ttft_ms": s.to_dict(),
        "rest_ttft_ms": s.to_dict(),
        "ttft_from_sent_ms": s.to_dict(),
    }
    assert Reasoning(4, s, s, s).to_dict() == {
        "requests": 4,
        "ttfa_ms": s.to_dict(),
        "reasoning_tokens": s.to_dict(),
        "answer_tokens": s.to_dict(),
    }
