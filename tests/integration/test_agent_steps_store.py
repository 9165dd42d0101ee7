"""Agent step names per request, and session metrics with ``--workers``, against the built-in engine over loopback.

Each request of an agent session carries its step name (the call-graph node) and the ids of the calls it waited
for — in the result, in the store, and in the JSON and Parquet exports — and they are the drawn graph's. A run with
two worker processes keeps every session whole in one worker and reports the same session structure as a single
process: the same sessions, steps per session, step names in the same order with the same call counts, none failed
or incomplete. Robust properties only: no timing is judged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

import tailscope
from tailscope.io.profile import load_profile
from tailscope.records import RunStatus
from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.store.runs import RunStore
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.profile_stream import profile_requests

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SEED = 5
REQUESTS = 21  # three whole sessions of seven calls

PROFILE = """\
name: agentic
classes:
  - name: agent
    input_tokens: 20
    output_tokens: 4
    agent:
      steps:
        - {name: plan, input_tokens: 30}
        - {name: search, fan_out: 3, gap_ms: "uniform:5:20"}
        - {name: answer, use_answers: true, gap_ms: 5}
        - name: check
          repeat: 2
          steps: [{name: think, use_answers: true, gap_ms: 5}]
arrival: {mode: open, rate: 8}
stop: {requests: 21}
"""
STEPS = ["plan", "search", "search", "search", "answer", "check/think", "check/think"]


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE)
    return path


def test_step_names_and_dependencies_are_stored_and_exported(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    specs = {s.id: s for s in profile_requests(load_profile(path), seed=SEED)}  # the run's own draw
    want = {i: (s.session_id, s.turn, s.step, tuple(d for d, _ in s.after)) for i, s in specs.items()}
    db = tmp_path / "s.duckdb"
    engine, options = build_replica("llama-3.1-8b", "h100-sxm")
    with EmbeddedServer(engine, options) as srv:
        res = tailscope.bench(srv.base_url, profile=path, metrics_url="off", seed=SEED, store=db)
    assert len(res.records) == REQUESTS
    assert all(r.ok for r in res.records)
    got = {r.id: (r.session_id, r.turn, r.step, r.depends_on) for r in res.records}
    assert got == want
    by_session: dict[str | None, list[str | None]] = {}
    for r in sorted(res.records, key=lambda r: r.id):
        by_session.setdefault(r.session_id, []).append(r.step)
    assert list(by_session.values()) == [STEPS] * 3
    # the join waited for every search branch; each search waited for the plan
    for ids in ({r.id for r in res.records if r.session_id == sid} for sid in by_session):
        first = min(ids)
        answer = specs[first + 4]
        assert set(got[answer.id][3]) == {first + 1, first + 2, first + 3}
        assert all(got[first + k][3] == (first,) for k in (1, 2, 3))
        assert got[first][3] == ()

    store = RunStore(db)
    stored = {r.id: (r.session_id, r.turn, r.step, r.depends_on) for r in store.load_records(res.run.id)}
    assert stored == want

    parquet = tmp_path / "r.parquet"
    tailscope.export_run(res.run.id, parquet, fmt="parquet", store=db)
    rows = (
        duckdb.connect()
        .execute("SELECT id, session_id, turn, step, depends_on FROM read_parquet(?) ORDER BY id", [str(parquet)])
        .fetchall()
    )
    assert {i: (sid, turn, step, tuple(dep)) for i, sid, turn, step, dep in rows} == want

    out = tmp_path / "r.json"
    tailscope.export_run(res.run.id, out, fmt="json", store=db)
    doc: dict[str, Any] = json.loads(out.read_text())
    exported = {r["id"]: (r["session"], r["turn"], r["step"], tuple(r["depends_on"])) for r in doc["requests"]}
    assert exported == want
    # the stored steps give the run's per-step times, in the order the agent runs them
    assert list(doc["summary"]["sessions"]["by_step"]) == ["plan", "search", "answer", "check/think"]


def _structure(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "sessions": s["sessions"],
        "failed": s["failed"],
        "incomplete": s["incomplete"],
        "complete": s["duration_ms"]["count"],
        "steps_mean": s["steps"]["mean"],
        "step_calls": s["step_ms"]["count"],
        "by_step": {name: st["count"] for name, st in s["by_step"].items()},
    }


def test_session_metrics_with_workers_have_the_single_process_shape(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    engine, options = build_replica("llama-3.1-8b", "h100-sxm")
    with EmbeddedServer(engine, options) as srv:
        one = tailscope.bench(srv.base_url, profile=path, metrics_url="off", seed=SEED)
        two = tailscope.bench(srv.base_url, profile=path, metrics_url="off", seed=SEED, workers=2)
    assert len(one.records) == len(two.records) == REQUESTS
    assert all(r.ok for r in two.records)
    workers: dict[str | None, set[int]] = {}
    for r in two.records:
        workers.setdefault(r.session_id, set()).add(r.worker)
    assert all(len(w) == 1 for w in workers.values())  # every session whole on one worker
    assert len({w for ws in workers.values() for w in ws}) == 2  # and both workers had sessions
    assert {r.id: r.step for r in two.records} == {r.id: r.step for r in one.records}
    s1, s2 = one.extra["sessions"], two.extra["sessions"]
    assert _structure(s2) == _structure(s1)
    assert _structure(s1) == {
        "sessions": 3,
        "failed": 0,
        "incomplete": 0,
        "complete": 3,
        "steps_mean": 7,
        "step_calls": REQUESTS,
        "by_step": {"plan": 3, "search": 9, "answer": 3, "check/think": 6},
    }
    assert list(s2["by_step"]) == list(s1["by_step"])  # the same order: as the agent runs them


def test_workers_count_sessions_the_stop_cut_as_incomplete(tmp_path: Path) -> None:
    """Closed loop, one slot per worker, stopped by time: a session cut between its fan-out and its answer has only
    successful requests, and is incomplete because its worker reports the calls it planned."""
    path = tmp_path / "closed.yaml"
    path.write_text(
        "name: closed\n"
        "classes:\n"
        "  - name: agent\n"
        "    input_tokens: 20\n"
        "    output_tokens: 4\n"
        "    agent: {steps: [{name: fetch, fan_out: 2}, {name: answer, use_answers: true, gap_ms: 15}]}\n"
        "arrival: {mode: closed, concurrency: 2}\n"
        "stop: {duration_s: 1.0}\n"
    )
    with ScriptedServer(ScriptedConfig(ttft_ms=40, itl_ms=10)) as srv:
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED, workers=2)
    sessions: dict[str | None, list[Any]] = {}
    for r in res.records:
        sessions.setdefault(r.session_id, []).append(r)
    complete = [rs for rs in sessions.values() if len(rs) == 3 and all(r.ok for r in rs)]
    assert complete
    s = res.extra["sessions"]
    assert s["failed"] == 0
    assert s["sessions"] == len(sessions)
    assert s["incomplete"] == len(sessions) - len(complete)
    assert s["duration_ms"]["count"] == len(complete)
    assert set(s["by_step"]) == {"fetch", "answer"}


def test_a_session_the_request_count_cut_is_incomplete_in_every_mode(tmp_path: Path) -> None:
    """``stop.requests`` counts calls: 10 calls are one whole session of seven and the first three of the next. The
    cut session has only successful calls, and is incomplete — in one process, with two workers, simulated, and
    rebuilt from the stored records of a run left without its summary (as a killed one is: ``runs show``)."""
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE.replace("stop: {requests: 21}", "stop: {requests: 10}"))
    db = tmp_path / "s.duckdb"
    engine, options = build_replica("llama-3.1-8b", "h100-sxm")
    with EmbeddedServer(engine, options) as srv:
        one = tailscope.bench(srv.base_url, profile=path, metrics_url="off", seed=SEED, store=db)
        two = tailscope.bench(srv.base_url, profile=path, metrics_url="off", seed=SEED, workers=2, store=db)
    sim = tailscope.simulate(profile=path, seed=SEED)
    for res in (one, two, sim):
        assert len(res.records) == 10
        assert all(r.ok for r in res.records)
    store = RunStore(db)
    rebuilt = []
    for res in (one, two):
        assert {r.session_calls for r in store.load_records(res.run.id)} == {7}
        store.finish_run(res.run.id, RunStatus.INCOMPLETE, None)  # records stored, no summary
        rebuilt.append(tailscope.show_run(res.run.id, store=db).summary["sessions"])
    for s in (one.extra["sessions"], two.extra["sessions"], sim.sessions, *rebuilt):
        assert s is not None
        assert (s["sessions"], s["failed"], s["incomplete"], s["duration_ms"]["count"]) == (2, 0, 1, 1)
        assert {name: st["count"] for name, st in s["by_step"].items()} == {
            "plan": 1,
            "search": 3,
            "answer": 1,
            "check/think": 2,
        }
