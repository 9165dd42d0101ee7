"""What every peer reader returns: the tools, their metric semantics and :class:`PeerRun`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.records import RequestRecord

PEER_TOOLS = ("vllm", "guidellm", "aiperf")

#: how each tool defines what it reports (shown with every imported run; docs/workload.md § Other tools' results)
SEMANTICS: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm bench serve: TTFT is timed from the send (time.perf_counter() before the POST), not from an intended "
        "send time, so client lag and (with --max-concurrency) client queueing are not in it.",
        "First token = the first SSE event with a choice (a role-only delta counts); ITL = every gap between such "
        "events, per chunk, pooled over requests; TPOT = (E2EL - TTFT)/(output tokens - 1) per request; E2EL ends "
        "at the last event with a choice.",
        "Output tokens from the server's usage (completion_tokens) when sent, else the tokenizer over the text.",
        "Percentiles: numpy linear interpolation; failed requests are left out of every latency.",
    ),
    "guidellm": (
        "GuideLLM: TTFT from request_start (the backend's send) to the first token iteration; TPOT = (last token - "
        "request start)/output tokens includes the TTFT; ITL = (last - first token)/(output tokens - 1) is what "
        "vLLM calls TPOT; request latency ends at request_end (stream close).",
        "No per-token times are kept: token iterations are spaced evenly between the first and the last token.",
        "Percentiles: the smallest value whose cumulative share is >= q (no interpolation); GuideLLM sums the "
        "shares in floating point (np.searchsorted over np.cumsum), so where n·q is a whole number its value can be "
        "the next sample (its median of 20 values is the 11th).",
    ),
    "aiperf": (
        "AIPerf: TTFT from request_start_ns (the send) to the first content-bearing response; request latency ends "
        "at the last response; ITL = (request latency - TTFT)/(OSL - 1) per request, what vLLM calls TPOT; its "
        "per-chunk gaps are inter_chunk_latency (ICL).",
        "Output tokens counted by AIPerf's tokenizer over the response text.",
        "Percentiles: numpy linear interpolation; warmup-phase records are marked warmup.",
    ),
}


@dataclass(frozen=True, slots=True)
class PeerRun:
    """One run as another tool recorded it.

    Attributes:
        records: one record per request; times in ns since the first send of the run.
        reported: the tool's own aggregate figures as it wrote them (``completed``, ``failed``, ``duration_s``,
            ``metrics``: ``{ttft_ms: {mean, median, p50, p90, p99, …}, itl_ms, tpot_ms, e2e_ms}``); empty when the
            file has none.
        settings: the load as the tool stated it (rate, concurrency, prompts, …).
        started_at: ISO 8601 UTC of the first send (or of the file's date), or None when the file has none.
        notes: what the import had to approximate.
    """

    tool: str
    source: str
    records: tuple[RequestRecord, ...]
    model: str = ""
    url: str = ""
    endpoint: str = "chat"
    started_at: str | None = None
    reported: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    label: str = ""
