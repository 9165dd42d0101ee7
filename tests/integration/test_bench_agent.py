"""Agentic sessions over real loopback HTTP: a profile class's agent call graph (plan → a fan-out of searches → an
answer that reads their answers → a repeated sub-agent) sent to the scripted server, which logs every body and tags
every response's text with its own id.

Robust properties only: a call is due exactly its drawn tool gap after the latest replayed end of the calls it waits
for (the due time is computed, not measured) and never sent before it (the event loop's timers may wake ~1 ms early);
the fan-out's calls overlap (each takes ≥ 70 ms on the server, the gap between their sends is a few ms); the answer's
prompt holds the full text of every search answer, and its input token count is what was sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.io.profile import load_profile
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.profile_stream import profile_requests

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SEED = 3

PROFILE = """\
name: agentic
classes:
  - name: agent
    input_tokens: 20
    output_tokens: 4
    agent:
      steps:
        - {name: plan, input_tokens: 30}
        - {name: search, fan_out: 3, gap_ms: "uniform:10:60"}
        - {name: answer, use_answers: true, gap_ms: 15}
        - name: check
          repeat: 2
          steps: [{name: think, use_answers: true, gap_ms: {dist: exponential, mean: 20, max: 80}}]
arrival: {mode: open, rate: 4}
stop: {requests: 28}
"""


def _end(r: dict[str, Any]) -> float:
    return float(r["stream_end_s"] or r["end_s"])


def _content(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def test_agent_sessions_keep_order_fan_out_join_gaps_and_answers(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE)
    specs = {s.id: s for s in profile_requests(load_profile(path), seed=SEED)}  # the same draw as the run's
    with ScriptedServer(ScriptedConfig(ttft_ms=50, itl_ms=7, tag_answers=True)) as srv:
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED)
        bodies = list(srv.truth.bodies)
    doc = json.loads(res.to_json())
    recs = {r["id"]: r for r in doc["requests"]}
    assert len(recs) == 28
    assert all(r["status"] == "ok" for r in recs.values())

    # which request each body was and which response (cmpl-i answered the i-th body) it got
    base_seed = SEED * 1_000_003
    rid_of: dict[int, str] = {}
    sent_text: dict[int, str] = {}
    for i, body in enumerate(bodies):
        text = _content(body)
        rid_of[int(text.split()[0]) - base_seed] = f"cmpl-{i}"
        sent_text[int(text.split()[0]) - base_seed] = text
    assert set(rid_of) == set(recs)

    sessions: dict[str, list[int]] = {}
    for rid, r in sorted(recs.items()):
        sessions.setdefault(r["session"], []).append(rid)
    assert len(sessions) == 4
    for ids in sessions.values():
        steps = [specs[i].step for i in ids]
        assert steps == ["plan", "search", "search", "search", "answer", "check/think", "check/think"]
        assert [recs[i]["turn"] for i in ids] == list(range(7))  # call order kept
        for i in ids[1:]:
            r, spec = recs[i], specs[i]
            due = max(_end(recs[d]) + gap / 1e9 for d, gap in spec.after)
            assert r["scheduled_s"] == pytest.approx(due, abs=1e-6)  # the join: the latest end, plus the tool gap
            assert r["sent_s"] >= r["scheduled_s"] - 2e-3
        searches = ids[1:4]
        assert {d for d, _ in specs[ids[4]].after} == set(searches)  # the answer waited for every branch
        for a in searches:  # the fan-out went out concurrently: each was sent before the others ended
            for b in searches:
                if a != b:
                    assert recs[a]["sent_s"] < _end(recs[b])
        gaps = {round(gap / 1e6, 3) for i in searches for _, gap in specs[i].after}
        assert all(10 <= g <= 60 for g in gaps)
        # answer substitution: every search's whole answer is in the answer's prompt, and nothing else's
        answer = ids[4]
        text = sent_text[answer]
        for s in searches:
            assert " ".join(f"{rid_of[s]}.{k}" for k in range(4)) in text
        assert {w.split(".")[0] for w in text.split() if w.startswith("cmpl-")} == {rid_of[s] for s in searches}
        assert recs[answer]["input_tokens"] == len(text.split()) == 20 + 3 * 4  # what was sent
        think1, think2 = ids[5], ids[6]
        assert f"{rid_of[answer]}.3" in sent_text[think1]
        assert f"{rid_of[think1]}.0" in sent_text[think2]
        assert rid_of[answer] not in sent_text[think2]

    s = doc["summary"]["sessions"]
    assert (s["sessions"], s["failed"], s["incomplete"]) == (4, 0, 0)
    assert s["steps"]["mean"] == 7
    assert s["duration_ms"]["count"] == 4
    assert set(s["by_step"]) == {"plan", "search", "answer", "check/think"}
    assert s["by_step"]["search"]["count"] == 12


def test_agent_prompts_are_fresh_per_run_with_the_same_shapes(tmp_path: Path) -> None:
    """The per-run nonce keeps prompts cold across runs; the seed keeps the graph, gaps and lengths."""
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE.replace("stop: {requests: 28}", "stop: {requests: 7}"))
    runs = []
    for _ in range(2):
        with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
            res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED)
            runs.append(({_content(b).split()[0]: _content(b) for b in srv.truth.bodies}, res))
    (a, ra), (b, rb) = runs
    assert set(a) == set(b)  # the same requests (seeded), …
    assert all(a[k] != b[k] for k in a)  # … with different text
    assert [len(a[k].split()) for k in sorted(a)] == [len(b[k].split()) for k in sorted(b)]
    assert sorted((r.id, r.input_tokens) for r in ra.records) == sorted((r.id, r.input_tokens) for r in rb.records)


def test_closed_loop_sessions_hold_their_slot_and_the_stop_cuts_them_incomplete(tmp_path: Path) -> None:
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
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED)
    doc = json.loads(res.to_json())
    sessions: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(doc["requests"], key=lambda r: r["id"]):
        sessions.setdefault(r["session"], []).append(r)
    complete = [rs for rs in sessions.values() if len(rs) == 3]
    assert len(complete) >= 4
    for rs in complete:
        a, b, answer = rs
        assert a["scheduled_s"] == b["scheduled_s"]  # both branches of the first step are due at the session's start
        assert answer["scheduled_s"] == pytest.approx(max(_end(a), _end(b)) + 0.015, abs=1e-6)
        assert answer["input_tokens"] == 20 + 2 * 4
    s = doc["summary"]["sessions"]
    assert s["failed"] == 0
    assert s["sessions"] == len(sessions)
    assert s["incomplete"] == len(sessions) - len(complete)  # the sessions in progress at the stop
    assert s["duration_ms"]["count"] == len(complete)


def test_agent_sessions_across_worker_processes(tmp_path: Path) -> None:
    """With ``--workers`` each session runs whole in one worker process, answers substituted there; the session
    metrics come back, per step name too (the step names travel with the records)."""
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE.replace("stop: {requests: 28}", "stop: {requests: 14}"))
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=5, tag_answers=True)) as srv:
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED, workers=2)
        bodies = list(srv.truth.bodies)
    assert len(res.records) == 14
    assert all(r.ok for r in res.records)
    by_session: dict[str | None, set[int | None]] = {}
    for r in res.records:
        by_session.setdefault(r.session_id, set()).add(r.worker)
    assert len(by_session) == 2
    assert all(len(w) == 1 for w in by_session.values())
    assert sum("cmpl-" in _content(b) for b in bodies) == 2 * 3  # each session: the answer and two thinks
    s = res.summary_dict()["sessions"]
    assert (s["sessions"], s["failed"]) == (2, 0)
    assert {name: st["count"] for name, st in s["by_step"].items()} == {
        "plan": 2,
        "search": 6,
        "answer": 2,
        "check/think": 4,
    }
