"""The rows and columns of a run's percentile table, shared by the console and the HTML report."""

from __future__ import annotations

#: Latency rows: label, summary key (ms).
LATENCY_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft_ms"),
    ("TPOT", "tpot_ms"),
    ("ITL", "itl_ms"),
    ("E2E", "e2e_ms"),
    ("max stall", "max_stall_ms"),
    ("send lag", "send_lag_ms"),
)
#: The rows timed from the actual send (the HTML report shows them below the latency rows).
FROM_SENT_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT from sent", "ttft_from_sent_ms"),
    ("E2E from sent", "e2e_from_sent_ms"),
)
#: Statistic columns, in the order shown.
STAT_COLUMNS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "p999", "max", "count")
