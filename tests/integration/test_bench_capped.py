"""An open loop with a concurrency cap (``bench --rate R --concurrency C``, vLLM bench's ``--request-rate`` with
``--max-concurrency``): arrivals follow the schedule, never more than C requests are in flight, and a request that
waited for a slot still has its latencies counted from its intended send time (no coordinated omission)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import tailscope
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def most_overlapping(intervals: Iterable[tuple[int, int]]) -> int:
    """The largest number of intervals open at one instant (an end at t closes before a start at t opens)."""
    spans = list(intervals)
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    return peak


def test_capped_open_loop_never_exceeds_the_cap_and_counts_the_wait(tmp_path: Path) -> None:
    # each request takes ≈ 20 + 5·10 = 70 ms: 2 slots serve ≈ 28/s, so 60/s offered makes requests wait for a slot
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=10)) as srv:
        res = tailscope.bench(
            srv.url, model="scripted", rate=60.0, arrival="constant", concurrency=2, requests=30,
            output_tokens=6, input_tokens=8, metrics_url="off", store=tmp_path / "db",
        )  # fmt: skip
        truth = srv.truth
        server_spans = [(t, truth.token_ns[rid][-1]) for rid, t in truth.arrived_ns.items() if truth.token_ns[rid]]
    recs = [r for r in res.records if r.ok]
    assert len(recs) == 30
    assert res.run.settings["max_concurrency"] == 2
    assert res.run.settings["mode"] == "open"
    # never more than 2 in flight: as the client sent them, and as the server saw them arrive
    assert most_overlapping((r.sent_ns or 0, r.stream_end_ns or r.end_ns or 0) for r in recs) <= 2
    assert most_overlapping(server_spans) <= 2
    # arrivals follow the open-loop schedule (constant 60/s), whatever the wait
    scheduled = sorted(r.scheduled_ns for r in res.records)
    gaps = [b - a for a, b in itertools.pairwise(scheduled)]
    assert all(abs(g - 1e9 / 60) < 1e6 for g in gaps)
    # the wait for a slot is send lag, and latencies count from the intended send: the late ones waited long
    lags = [(r.sent_ns or 0) - r.scheduled_ns for r in recs]
    assert max(lags) > 0.1e9  # 30 requests at 28/s served vs 60/s offered: the last waited ≈ 0.5 s
    for r in recs:
        assert r.first_token_ns is not None
        assert r.first_token_ns - r.scheduled_ns >= (r.sent_ns or 0) - r.scheduled_ns
    assert res.summary.ttft_ms is not None
    assert res.summary.ttft_ms.max >= max(lags) / 1e6  # the headline TTFT includes the wait
    # the warnings name the cap, not a slow client
    assert any(w.startswith("CAP REACHED") for w in res.summary.warnings), res.summary.warnings
    blamed = ("CLIENT BOTTLENECK: send lag", "CLIENT BOTTLENECK: achieved", "CLIENT BEHIND")  # (event-loop lag on a
    assert not any(w.startswith(blamed) for w in res.summary.warnings), res.summary.warnings  # busy machine may be)


def test_vllm_bench_aliases_run_a_capped_open_loop(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=10)) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "tailscope", "bench", "--url", srv.url, "--model", "scripted",
             "--request-rate", "10", "--max-concurrency", "4", "--num-prompts", "12", "--output-tokens", "4",
             "--metrics-url", "off", "--db", str(tmp_path / "db"), "--json", str(out)],
            capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ),
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    settings = doc["run"]["settings"]
    assert settings["mode"] == "open"
    assert settings["max_concurrency"] == 4
    assert settings["rate"] == 10
    assert doc["summary"]["requests"]["completed"] == 12
