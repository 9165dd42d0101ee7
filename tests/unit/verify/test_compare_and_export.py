"""compare across runs, and loading a bench --json export back into records."""

from __future__ import annotations

import json

import pytest
from gate_factory import lognormal_run, record

from tailscope.errors import ContractError
from tailscope.metrics.summary import summarize
from tailscope.records import ErrorClass, Status
from tailscope.report.verify import compare_text
from tailscope.verify.compare import compare_runs, parse_metrics
from tailscope.verify.rundata import run_from_export


def test_compare_marks_significant_differences() -> None:
    a = lognormal_run("aaaa", 1500, seed=1)
    b = lognormal_run("bbbb", 1500, seed=2)  # noise
    c = lognormal_run("cccc", 1500, seed=3, ttft_median_ms=400.0)  # 2× slower
    cmp = compare_runs([a, b, c], metrics=("ttft_ms", "requests_per_s"), stats=("p50", "p99"))
    rows = {r.label: r for r in cmp.rows}
    assert set(rows) == {"ttft_ms.p50", "ttft_ms.p99", "requests_per_s"}
    p50 = rows["ttft_ms.p50"]
    assert p50.direction(0) == "same"
    assert p50.direction(1) == "worse"
    d = p50.diffs[1]
    assert d is not None
    assert d.rel is not None
    assert d.rel == pytest.approx(1.0, abs=0.1)
    text = compare_text(cmp)
    assert "* worse" in text
    assert "ttft_ms.p99" in text
    doc = json.loads(json.dumps(cmp.to_dict()))
    assert doc["reference"] == "aaaa"
    assert doc["rows"][0]["diffs"][1]["direction"] == "worse"


def test_parse_metrics() -> None:
    assert parse_metrics("ttft,tpot_ms, error_rate") == ("ttft_ms", "tpot_ms", "error_rate")
    with pytest.raises(ValueError, match="unknown metric 'latency'"):
        parse_metrics("latency")


def _export_row(r: object) -> dict[str, object]:
    from tailscope.records import RequestRecord

    assert isinstance(r, RequestRecord)
    s = lambda ns: None if ns is None else ns / 1e9  # noqa: E731
    return {
        "id": r.id,
        "class": r.request_class,
        "scheduled_s": s(r.scheduled_ns),
        "sent_s": s(r.sent_ns),
        "first_token_s": s(r.first_token_ns),
        "end_s": s(r.end_ns),
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "tokens_source": r.tokens_source.value,
        "status": r.status.value,
        "error": r.error.value if r.error else None,
        "server_request_id": None,
        "chunk_times_s": [t / 1e9 for t in r.chunk_times_ns],
        "chunk_tokens": list(r.chunk_tokens),
    }


def test_export_round_trip_gives_the_same_summary() -> None:
    recs = [record(i, sched_ms=i * 37.0, ttft_ms=100.0 + i, tpot_ms=10.0 + i % 3, n_out=5) for i in range(40)]
    recs.append(record(40, sched_ms=5.0, ttft_ms=0, status=Status.ERROR, error=ErrorClass.HTTP_429))
    doc = {"run": {"id": "r1", "kind": "bench"}, "summary": {}, "requests": [_export_row(r) for r in recs]}
    run = run_from_export(json.loads(json.dumps(doc)), source="out.json")
    assert run.id == "r1"
    assert len(run.records) == 41
    assert run.records[40].error is ErrorClass.HTTP_429
    a, b = summarize(recs).to_dict(), summarize(run.records).to_dict()
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert b[key].pop("too_few") == a[key].pop("too_few")
        assert b[key] == pytest.approx(a[key])
    assert b["requests"] == a["requests"]


def test_export_errors_name_the_request() -> None:
    with pytest.raises(ContractError, match=r"out\.json: requests\[0\]: missing field 'scheduled_s'"):
        run_from_export({"requests": [{"id": 1}]}, source="out.json")
    with pytest.raises(ContractError, match="not a tailscope export"):
        run_from_export([1, 2], source="out.json")
    with pytest.raises(ContractError, match=r"requests\[0\]\.status"):
        run_from_export({"requests": [{"scheduled_s": 0, "status": "weird"}]}, source="out.json")


def test_compare_markdown() -> None:
    from tailscope.report.verify import compare_markdown

    a = lognormal_run("aaaa", 800, seed=1)
    c = lognormal_run("cccc", 800, seed=3, ttft_median_ms=400.0)
    md = compare_markdown(compare_runs([a, c], metrics=("ttft_ms",), stats=("p50",)))
    lines = md.splitlines()
    assert lines[0] == "| metric | `aaaa` | `cccc` | Δ `cccc` |"
    assert lines[1] == "|---|---|---|---|"
    assert lines[2].startswith("| `ttft_ms.p50` | ")
    assert lines[2].endswith("* worse** |")
