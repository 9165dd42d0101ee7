"""Speculative decoding acceptance from the server's spec-decode counters, over the run, shown beside TPOT."""

from __future__ import annotations

import io

from rich.console import Console

from tailscope.metrics.server import summarize_server
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, ServerSample, Status, TokensSource
from tailscope.report.console import print_summary

MS = 1_000_000


def _record(i: int) -> RequestRecord:
    times = tuple(i * 100 * MS + (10 + 5 * k) * MS for k in range(9))  # TTFT 10 ms, then 5 ms per token
    return RequestRecord(
        id=i, scheduled_ns=i * 100 * MS, sent_ns=i * 100 * MS, first_token_ns=times[0], end_ns=times[-1],
        status=Status.OK, output_tokens=9, chunk_times_ns=times, chunk_tokens=(1,) * 9,
        tokens_source=TokensSource.USAGE,
    )  # fmt: skip


def test_acceptance_rate_is_the_counters_delta_over_the_run_and_printed_beside_tpot() -> None:
    samples = [
        ServerSample(0, "vllm:spec_decode_num_draft_tokens_total", 1000.0),
        ServerSample(0, "vllm:spec_decode_num_accepted_tokens_total", 600.0),
        ServerSample(5 * 10**9, "vllm:spec_decode_num_draft_tokens_total", 1400.0),
        ServerSample(5 * 10**9, "vllm:spec_decode_num_accepted_tokens_total", 900.0),
    ]
    server = summarize_server(samples)
    assert server["spec_decode"]["acceptance_rate"] == 0.75  # (900 − 600) / (1400 − 1000): this run's drafts only
    assert server["spec_decode"]["draft_tokens"] == 400
    summary = summarize([_record(i) for i in range(4)]).to_dict()
    summary["server"] = server
    out = io.StringIO()
    print_summary({"id": "r"}, summary, Console(file=out, width=160))
    line = next(x for x in out.getvalue().splitlines() if "spec decode" in x)
    assert "75.0% of 400 draft tokens accepted (TPOT p50 5.0" in line, line
