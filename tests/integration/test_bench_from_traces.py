"""Trace → load against the built-in engine over real HTTP: an agent trace set (the ``trace demo`` set, plus traces
with a parallel fan-out of model calls) ingested into a store, turned into sessions by ``bench --from-traces`` and
replayed. Each trace's call order, its fan-outs and its gaps are kept, and the session metrics are reported.

Robust properties only: a call is due exactly its recorded gap after the replayed end of the call it follows (the
due time is computed, not measured), it is never sent before that (within the event loop's 1 ms timer granularity),
calls that overlapped in the trace overlap again (each takes hundreds of ms on the engine, the gap between their
sends is a few ms), and sessions start at their traces' offsets.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.records import Span
from tailscope.trace.demo import to_otlp_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
MS = 1_000_000


def _fanout(k: int) -> list[Span]:
    """plan → (left ∥ right) → answer, 30 ms and 80 ms gaps; traces start 200 ms apart."""
    tid = f"{k + 1:032x}"
    t0 = 1_767_225_600_000_000_000 + k * 200 * MS

    def s(sid: str, parent: str | None, name: str, a: int, b: int, **attrs: Any) -> Span:
        return Span(tid, f"{k:08x}{sid:0>8}", parent and f"{k:08x}{parent:0>8}", name, t0 + a * MS, t0 + b * MS,
                    service="agent", kind="CLIENT", attributes={"gen_ai.operation.name": "chat", **attrs},
                    layer="inference")  # fmt: skip

    root = Span(tid, f"{k:08x}{'1':0>8}", None, "invoke_agent", t0, t0 + 1500 * MS, service="agent",
                attributes={"gen_ai.operation.name": "invoke_agent"}, layer="agent")  # fmt: skip
    return [
        root,
        s("2", "1", "chat plan", 0, 300, **{"gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 16}),
        s("3", "1", "chat left", 330, 700, **{"gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 24}),
        s("4", "1", "chat right", 335, 650, **{"gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 24}),
        s("5", "1", "chat answer", 780, 1200, **{"gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 16}),
    ]


def _sessions(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in doc["requests"]:
        out[r["session"]].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["turn"])
    return out


def _end(r: dict[str, Any]) -> float:
    return float(r["stream_end_s"] or r["end_s"])


def test_fanout_traces_replayed_keep_order_fanout_and_gaps(tmp_path: Path) -> None:
    spans = [s for k in range(4) for s in _fanout(k)]
    path = tmp_path / "fanout.otlp.json"
    path.write_text(json.dumps(to_otlp_json(spans)) + "\n")
    db = tmp_path / "store.duckdb"
    tailscope.ingest_traces([path], set_name="fanout", store=db)
    result = tailscope.bench(from_traces="fanout", store=db, seed=1)
    doc = json.loads(result.to_json())
    assert doc["run"]["settings"]["mode"] == "trace_load"
    assert doc["run"]["settings"]["trace_load"]["max_parallel"] == 2
    sessions = _sessions(doc)
    assert len(sessions) == 4
    for rs in sessions.values():
        assert [r["turn"] for r in rs] == [0, 1, 2, 3]
        assert all(r["status"] == "ok" for r in rs)
        plan, left, right, answer = rs
        # each record names the calls it waited for: the fan-out the plan, the join both branches
        assert [sorted(r["depends_on"]) for r in rs] == [
            [],
            [plan["id"]],
            [plan["id"]],
            sorted([left["id"], right["id"]]),
        ]
        # sequential steps: due exactly the recorded gap after the replayed end, never sent before it
        assert left["scheduled_s"] == pytest.approx(_end(plan) + 0.030, abs=1e-6)
        assert right["scheduled_s"] == pytest.approx(_end(plan) + 0.035, abs=1e-6)
        assert answer["scheduled_s"] == pytest.approx(max(_end(left) + 0.080, _end(right) + 0.130), abs=1e-6)
        for r in (left, right, answer):  # the event loop's timers may wake up to ~1 ms early (millisecond clock)
            assert r["sent_s"] >= r["scheduled_s"] - 2e-3
        # the fan-out is parallel again: each of the two was sent before the other ended
        assert left["sent_s"] < _end(right)
        assert right["sent_s"] < _end(left)
    # sessions start at their traces' offsets (200 ms apart)
    starts = sorted(rs[0]["scheduled_s"] for rs in sessions.values())
    assert starts == pytest.approx([0.0, 0.2, 0.4, 0.6], abs=1e-6)
    s = doc["summary"]["sessions"]
    assert s["sessions"] == 4
    assert s["failed"] == 0
    assert s["steps"]["mean"] == 4
    assert s["duration_ms"]["count"] == 4


def test_demo_agent_traces_through_the_cli(tmp_path: Path) -> None:
    """`trace demo` → `trace ingest` → `bench --from-traces` (the command line; the built-in engine)."""
    db = tmp_path / "store.duckdb"
    env = {**os.environ, "TAILSCOPE_DB": str(db), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, env=env,
                              timeout=180, check=False)  # fmt: skip

    assert cli("trace", "demo", "--out", str(tmp_path / "demo"), "--traces", "12").returncode == 0
    ing = cli("trace", "ingest", str(tmp_path / "demo" / "before.otlp.json"), "--set", "demo")
    assert ing.returncode == 0, ing.stderr
    out = tmp_path / "run.json"
    proc = cli("bench", "--from-traces", "demo", "--requests", "6", "--time-scale", "0.5", "--json", str(out),
               "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sessions 6  failed 0" in proc.stdout
    doc = json.loads(out.read_text())
    spans_by_trace: dict[str, int] = {}
    for rs in _sessions(doc).values():
        assert [r["turn"] for r in rs] == list(range(len(rs)))
        assert len(rs) in (2, 3)  # plan and answer, and sometimes the failed answer that was retried
        spans_by_trace[rs[0]["session"]] = len(rs)
        for prev, nxt in itertools.pairwise(rs):  # the demo's model calls are sequential (tools between)
            assert nxt["scheduled_s"] > _end(prev)
            assert nxt["sent_s"] >= _end(prev) - 2e-3
        assert rs[0]["input_tokens"] >= 900  # gen_ai.usage.input_tokens of the planning call
    assert len(spans_by_trace) == 6


def test_from_traces_refuses_rate_and_unknown_set(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    with pytest.raises(tailscope.ConfigError, match="--rate does not apply to --from-traces"):
        tailscope.bench(from_traces="x", rate=3.0, store=db)
    with pytest.raises(tailscope.TailscopeError, match="x"):
        tailscope.bench(from_traces="x", store=db)
