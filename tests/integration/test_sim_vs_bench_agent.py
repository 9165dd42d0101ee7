"""The agent example simulated (virtual time) and benched against the built-in engine (wall clock, real loopback
HTTP; ``tailscope serve`` runs the same engine model): the call graphs run the same way in both.

Robust properties only: every session sends its calls in the same order (a fan-out's branches follow one end, so
their order is their drawn gaps'; the rest is sequential), and each agent step's median time is comparable (within
a factor of two; judged only when the host is not overloaded: the server's steps run in real time).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import tailscope
from tailscope.records import RequestRecord
from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.testing.judgement import Judgement

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
PROFILE = Path(__file__).resolve().parents[2] / "examples" / "agent.yaml"
REQUESTS = 30  # about four sessions of the example (one arrival a second)


def _order(records: list[RequestRecord]) -> dict[str, list[int]]:
    """Each session's request ids in the order they were due."""
    by: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by[r.session_id or ""].append(r)
    return {sid: [r.id for r in sorted(rs, key=lambda r: (r.scheduled_ns, r.id))] for sid, rs in by.items()}


def test_agent_example_simulated_and_benched_run_the_same_call_graphs(judgement: Judgement) -> None:
    sim = tailscope.simulate(profile=PROFILE, requests=REQUESTS)
    engine, options = build_replica("llama-3.1-8b", "h100-sxm")
    with EmbeddedServer(engine, options) as srv:
        bench = tailscope.bench(srv.base_url, profile=PROFILE, requests=REQUESTS, metrics_url="off")
    assert len(sim.records) == len(bench.records) == REQUESTS
    assert all(r.ok for r in sim.records)
    assert all(r.ok for r in bench.records)
    assert _order(sim.records) == _order(bench.records)

    s_sessions, b_sessions = sim.sessions, bench.extra.get("sessions")
    assert s_sessions is not None
    assert b_sessions is not None
    assert s_sessions["sessions"] == b_sessions["sessions"]
    assert list(s_sessions["by_step"]) == list(b_sessions["by_step"])
    ratios = {
        step: b_sessions["by_step"][step]["p50"] / s_sessions["by_step"][step]["p50"] for step in s_sessions["by_step"]
    }
    print("\nbench / sim median time per step:", {k: round(v, 2) for k, v in ratios.items()})
    judgement.holds(all(0.5 <= r <= 2.0 for r in ratios.values()), f"bench / sim median time per step {ratios}")
