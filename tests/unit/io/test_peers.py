"""Other tools' result files read as records: each tool's own figures are reproduced from the imported records in its
own definitions (tests/fixtures/peers/README.md has the files' provenance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailscope.errors import ContractError
from tailscope.io.peers import read_peer_results
from tailscope.metrics.dialects import summarize_dialect
from tailscope.records import Status

FIX = Path(__file__).parents[2] / "fixtures" / "peers"
VLLM = FIX / "vllm_bench_serve.json"
GUIDELLM = FIX / "guidellm_benchmarks.json"
GUIDELLM_REAL = FIX / "guidellm_real_benchmarks.json"
AIPERF = FIX / "aiperf" / "profile_export.jsonl"
AIPERF_REAL = FIX / "aiperf_real" / "profile_export.jsonl"


def _close(a: float | None, b: float, rel: float = 0.01) -> bool:
    return a is not None and abs(a - b) <= rel * abs(b)


def test_vllm_result_written_by_vllm_reproduces_its_ttft_itl_and_completed() -> None:
    (run,) = read_peer_results(VLLM, tool="vllm")
    doc = json.loads(VLLM.read_text())
    view = summarize_dialect(list(run.records), "vllm")
    assert view["requests"]["completed"] == doc["completed"] == len(run.records)
    for ours, theirs in (("ttft_ms", "ttft"), ("itl_ms", "itl"), ("tpot_ms", "tpot"), ("e2e_ms", "e2el")):
        assert _close(view["metrics"][ours]["median"], doc[f"median_{theirs}_ms"]), ours
        assert _close(view["metrics"][ours]["p99"], doc[f"p99_{theirs}_ms"]), ours
    assert run.reported["metrics"]["ttft_ms"]["p99"] == doc["p99_ttft_ms"]
    assert run.model == "tiny"
    assert run.endpoint == "chat"
    # the role-only first delta is an event, not a token: token counts are vLLM's output_lens
    assert [r.output_tokens for r in run.records] == doc["output_lens"]
    assert all(sum(r.chunk_tokens) == r.output_tokens for r in run.records)
    assert all(r.first_event_ns is not None and r.first_token_ns is not None for r in run.records)


def test_vllm_failed_requests_and_appended_results(tmp_path: Path) -> None:
    doc = json.loads(VLLM.read_text())
    doc["errors"][3] = "Traceback (most recent call last):\naiohttp.ClientConnectorError: connect refused"
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")  # --append-result writes one per line
    runs = read_peer_results(path, tool="vllm")
    assert len(runs) == 2
    bad = runs[0].records[3]
    assert bad.status is Status.ERROR
    assert bad.error_detail
    assert "connect refused" in bad.error_detail
    assert runs[1].source.endswith(":2")


def test_vllm_without_detailed_data_says_what_to_do(tmp_path: Path) -> None:
    doc = {k: v for k, v in json.loads(VLLM.read_text()).items() if not isinstance(v, list)}
    path = tmp_path / "summary-only.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ContractError, match=r"summary-only\.json: no per-request data .*--save-detailed"):
        read_peer_results(path, tool="vllm")


def test_vllm_list_lengths_must_agree(tmp_path: Path) -> None:
    doc = json.loads(VLLM.read_text())
    doc["ttfts"] = doc["ttfts"][:-1]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ContractError, match=r"cut\.json: ttfts has 23 entries, start_times 24"):
        read_peer_results(path, tool="vllm")


def _check_reported(run: Any, tool: str, keys: tuple[str, ...]) -> None:
    view = summarize_dialect(list(run.records), tool)
    for key in keys:
        theirs = run.reported["metrics"][key]
        assert _close(view["metrics"][key]["median"], theirs["median"]), key
        assert _close(view["metrics"][key]["p99"], theirs["p99"]), key
    assert view["requests"]["completed"] == run.reported["completed"]
    assert view["requests"]["failed"] == run.reported["failed"]


def test_guidellm_benchmarks_json_reproduces_its_figures() -> None:
    (run,) = read_peer_results(GUIDELLM, tool="guidellm")
    _check_reported(run, "guidellm", ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"))
    assert run.url == "http://127.0.0.1:8000"
    assert run.model == "tiny"
    errored = [r for r in run.records if r.status is Status.ERROR]
    assert len(errored) == 2
    assert all("500" in (r.error_detail or "") for r in errored)
    # the intended start (targeted_start) is kept as scheduled, before the send
    assert all(r.scheduled_ns <= (r.sent_ns or 0) for r in run.records)
    assert any(r.scheduled_ns < (r.sent_ns or 0) for r in run.records)


def test_guidellm_file_written_by_guidellm_reproduces_its_figures_and_counts() -> None:
    """GuideLLM 0.8.1's own benchmarks.json: medians and p99s within 1 % (its percentiles sum 1/n shares in floating
    point, so with 20 values its median is the 11th: the dialect does the same) and its completed count."""
    (run,) = read_peer_results(GUIDELLM_REAL, tool="guidellm")
    assert run.url == "http://127.0.0.1:18432"
    assert run.model == "tiny"
    _check_reported(run, "guidellm", ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"))
    assert run.reported["completed"] == 20
    ttfts = sorted((r.first_token_ns - (r.sent_ns or 0)) / 1e6 for r in run.records if r.first_token_ns is not None)
    assert _close(ttfts[10], run.reported["metrics"]["ttft_ms"]["median"])  # the 11th of 20


def test_aiperf_profile_export_reproduces_its_figures_and_warmup() -> None:
    (run,) = read_peer_results(AIPERF, tool="aiperf")
    _check_reported(run, "aiperf", ("ttft_ms", "itl_ms", "icl_ms", "e2e_ms"))
    assert sum(r.warmup for r in run.records) == 2
    (failed,) = [r for r in run.records if not r.ok]
    assert failed.http_status == 503
    assert failed.error is not None
    assert failed.error.value == "http_5xx"
    assert run.model == "tiny"


def test_aiperf_file_written_by_aiperf_reproduces_its_figures() -> None:
    """AIPerf 0.13's own profile_export.jsonl with its profile_export_aiperf.json beside it."""
    (run,) = read_peer_results(AIPERF_REAL, tool="aiperf")
    _check_reported(run, "aiperf", ("ttft_ms", "itl_ms", "icl_ms", "e2e_ms"))
    assert run.reported["completed"] == 16
    assert sum(r.warmup for r in run.records) == 2
    assert run.model == "tiny"
    assert run.url == "http://127.0.0.1:18433"
    assert "aiperf profile" in run.settings["cli_command"]


def test_aiperf_bad_line_names_file_and_line(tmp_path: Path) -> None:
    lines = AIPERF.read_text().splitlines()
    lines[4] = '{"metadata": {"request_start_ns": "soon"}, "metrics": {}}'
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ContractError, match=r"profile_export\.jsonl:5: metadata\.request_start_ns must be an integer"):
        read_peer_results(path, tool="aiperf")


def test_wrong_tool_and_unknown_tool() -> None:
    with pytest.raises(ContractError, match=r"guidellm_benchmarks\.json: no per-request data"):
        read_peer_results(GUIDELLM, tool="vllm")
    with pytest.raises(ContractError, match=r"vllm_bench_serve\.json: benchmarks: expected GuideLLM"):
        read_peer_results(VLLM, tool="guidellm")
    with pytest.raises(ContractError, match=r"--from 'genai-perf'"):
        read_peer_results(VLLM, tool="genai-perf")
