"""The public synthetic traces: ``demo_traces`` (spans), ``spans_to_otlp_json`` (a document ``analyze_traces`` reads)
and ``write_demo_traces`` (the two files of ``tailscope trace demo``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tailscope


def test_demo_traces_are_seeded_trees_of_spans() -> None:
    traces = list(tailscope.demo_traces(40, seed=3, extra_calls=3))
    assert len(traces) == 40
    for spans in traces:
        assert len({s.trace_id for s in spans}) == 1
        roots = [s for s in spans if s.parent_id is None]
        assert [r.name for r in roots] == ["POST /chat"]
        assert all(roots[0].start_ns <= s.start_ns and s.end_ns <= roots[0].end_ns for s in spans)
        assert len(spans) in (20, 21)  # 3 tools × (1 + 1 backend + 3 cache calls) + 5, and the retry
    assert len({spans[0].trace_id for spans in traces}) == 40
    again = list(tailscope.demo_traces(40, seed=3, extra_calls=3))
    assert again == traces
    assert list(tailscope.demo_traces(40, seed=4, extra_calls=3)) != traces


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"traces": 0}, "traces must be ≥ 1"),
        ({"extra_calls": -1}, "extra_calls must be ≥ 0"),
        ({"tool_scale": 0.0}, "tool_scale must be > 0"),
        ({"sequential_share": 1.5}, "sequential_share must be within [0, 1]"),
        ({"retry_rate": float("nan")}, "retry_rate must be within [0, 1]"),
    ],
)
def test_demo_traces_refuses_out_of_range(kwargs: dict[str, float], words: str) -> None:
    with pytest.raises(tailscope.ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        tailscope.demo_traces(**kwargs)  # type: ignore[arg-type]


def test_otlp_document_reads_back(tmp_path: Path) -> None:
    traces = list(tailscope.demo_traces(30, retry_rate=0.5))
    spans = [s for t in traces for s in t]
    doc = tailscope.spans_to_otlp_json(spans)
    services = {rs["resource"]["attributes"][0]["value"]["stringValue"] for rs in doc["resourceSpans"]}
    assert services == {s.service for s in spans}
    assert sum(len(rs["scopeSpans"][0]["spans"]) for rs in doc["resourceSpans"]) == len(spans)
    path = tmp_path / "set.otlp.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    analysis = tailscope.analyze_traces(path)
    assert analysis.traces["count"] == 30


def test_write_demo_traces_writes_the_generated_spans(tmp_path: Path) -> None:
    before, after = tailscope.write_demo_traces(tmp_path / "demo", traces=5, seed=11)
    assert (before.name, after.name) == ("before.otlp.json", "after.otlp.json")
    spans = [s for t in tailscope.demo_traces(5, seed=11) for s in t]
    assert (
        before.read_text(encoding="utf-8")
        == json.dumps(tailscope.spans_to_otlp_json(spans), separators=(",", ":")) + "\n"
    )
    slower = [s for t in tailscope.demo_traces(5, seed=12, sequential_share=0.05, tool_scale=1.6) for s in t]
    assert json.loads(after.read_text(encoding="utf-8")) == tailscope.spans_to_otlp_json(slower)
