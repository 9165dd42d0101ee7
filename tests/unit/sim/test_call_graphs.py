"""The simulator runs call-graph sessions (agent profiles, trace → load) as the load generator does: a call is due
at the latest ``predecessor end + gap``, calls with no path between them overlap, a failed call's dependents are
never sent, answers lengthen the prompt after its own text (no prefix reuse from them), a closed-loop client runs a
whole session, and ``tailscope sim`` reports session metrics by step."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.records import RequestRecord, Status
from tailscope.sim.run import SimArgs, run_sim
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

ROOT = Path(__file__).resolve().parents[3]
MS = 1_000_000


def _cluster() -> ClusterSpec:
    return ClusterSpec(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), model_id="llama-3.1-8b")


def _graph(base: int, sid: str, at_ns: int | None, *, branch_in: int = 300) -> list[RequestSpec]:
    """plan → 3 parallel searches (gaps 5, 9, 13 ms) → answer reading them (gap 2 ms)."""

    def spec(k: int, n_in: int, n_out: int, step: str, **kw: Any) -> RequestSpec:
        return RequestSpec(
            base + k, n_in, n_out, request_class="agent", session_id=sid, turn=k, seed=base + k, step=step, **kw
        )

    return [
        spec(0, 400, 20, "plan", at_ns=at_ns),
        *(spec(k, branch_in, 10 + k, "search", after=((base, (1 + 4 * k) * MS),)) for k in (1, 2, 3)),
        spec(
            4,
            200,
            30,
            "answer",
            after=tuple((base + k, 2 * MS) for k in (1, 2, 3)),
            answers_from=(base + 1, base + 2, base + 3),
        ),
    ]


def _by_id(records: list[RequestRecord]) -> dict[int, RequestRecord]:
    return {r.id: r for r in records}


def _end(r: RequestRecord) -> int:
    assert r.end_ns is not None
    return r.end_ns


def test_fan_out_and_join_follow_their_predecessors_ends() -> None:
    specs = _graph(0, "g", 0)
    recs = _by_id(list(Simulation(_cluster(), specs).run()))
    assert set(recs) == {0, 1, 2, 3, 4}
    assert all(r.status is Status.OK for r in recs.values())
    plan = recs[0]
    branches = [recs[k] for k in (1, 2, 3)]
    for k, b in enumerate(branches, 1):
        assert b.scheduled_ns == _end(plan) + (1 + 4 * k) * MS  # due exactly its gap after the plan's end
    assert max(b.scheduled_ns for b in branches) < min(_end(b) for b in branches)  # the branches overlap
    join = recs[4]
    assert join.scheduled_ns == max(_end(b) + 2 * MS for b in branches)
    assert all(join.scheduled_ns >= _end(b) + 2 * MS for b in branches)
    # the answers' text comes on top of the call's own prompt
    assert join.input_tokens == 200 + sum(b.output_tokens or 0 for b in branches)
    assert [b.input_tokens for b in branches] == [300, 300, 300]


def test_a_prompt_template_sets_the_prompt_length_as_it_renders() -> None:
    """The answer places the first search's answer twice and drops its own text: the prompt is as long as that."""
    specs = _graph(0, "g", 0)
    specs[4] = replace(specs[4], prompt_template="Top hit: {{answer_1}} all: {{answers}} again {{answer_1}}")
    recs = _by_id(list(Simulation(_cluster(), specs).run()))
    outs = [recs[k].output_tokens or 0 for k in (1, 2, 3)]
    assert all(outs)
    assert recs[4].input_tokens == 4 + 2 * outs[0] + sum(outs)  # 4 literal words, no {{prompt}}: no own text
    # with a shared prefix, the prefix stays in front and counts once
    pre = [replace(s, prefix_id=0, prefix_tokens=64, input_tokens=s.input_tokens + 64) for s in specs]
    recs = _by_id(list(Simulation(_cluster(), pre).run()))
    outs = [recs[k].output_tokens or 0 for k in (1, 2, 3)]
    assert recs[4].input_tokens == 64 + 4 + 2 * outs[0] + sum(outs)


def test_failed_predecessor_drops_its_dependents() -> None:
    # the third search is too long for the KV cache: the engine refuses it, so the answer is never sent
    specs = _graph(0, "g", 0)
    specs[3] = RequestSpec(3, 5_000_000, 13, request_class="agent", session_id="g", turn=3, seed=3, step="search",
                           after=((0, 13 * MS),))  # fmt: skip
    sim = Simulation(_cluster(), specs)
    recs = _by_id(list(sim.run()))
    assert recs[3].status is Status.ERROR
    assert 4 not in recs  # not sent, as the load generator does
    assert {k for k, r in recs.items() if r.status is Status.OK} == {0, 1, 2}
    assert sim.planned == {"g": 5}


def test_calls_depending_on_nothing_keep_their_own_time() -> None:
    # trace → load: a later call that depends on no earlier one is due at its own at_ns
    specs = [
        RequestSpec(0, 300, 20, at_ns=10 * MS, session_id="t", turn=0, seed=0),
        RequestSpec(1, 300, 20, at_ns=30 * MS, session_id="t", turn=1, seed=1),
        RequestSpec(2, 300, 20, session_id="t", turn=2, seed=2, after=((0, 4 * MS), (1, 4 * MS))),
    ]
    recs = _by_id(list(Simulation(_cluster(), specs).run()))
    assert recs[0].scheduled_ns == 10 * MS
    assert recs[1].scheduled_ns == 30 * MS
    assert recs[2].scheduled_ns == max(_end(recs[0]), _end(recs[1])) + 4 * MS
    assert recs[2].input_tokens == 300  # no answers_from: nothing added (and no conversation history)


def test_closed_loop_client_runs_whole_sessions() -> None:
    specs = [s for n in range(4) for s in _graph(10 * n, f"s{n}", None)]
    recs = list(Simulation(_cluster(), specs, concurrency=1).run())
    assert len(recs) == 20
    assert all(r.ok for r in recs)
    spans = []
    for n in range(4):
        mine = [r for r in recs if r.session_id == f"s{n}"]
        spans.append((min(r.scheduled_ns for r in mine), max(_end(r) for r in mine)))
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end  # one client: the next session starts only when the whole graph has ended
    # the branches of each session still overlap (a client runs the session's calls concurrently)
    by = _by_id(recs)
    assert max(by[k].scheduled_ns for k in (1, 2, 3)) < min(_end(by[k]) for k in (1, 2, 3))


def test_answers_and_calls_of_a_session_are_no_prefix_hits() -> None:
    # no shared prefix: the calls of a session share no text, so nothing is a prefix-cache hit
    specs = [s for n in range(3) for s in _graph(10 * n, f"s{n}", n * 200 * MS)]
    sim = Simulation(_cluster(), specs)
    list(sim.run())
    assert sim.result.prefix_hits_tokens == 0


def test_shared_prefix_is_reused_by_every_call() -> None:
    from dataclasses import replace

    specs = [replace(s, input_tokens=s.input_tokens + 256, prefix_id=0, prefix_tokens=256) for s in _graph(0, "g", 0)]
    sim = Simulation(_cluster(), specs)
    recs = list(sim.run())
    assert all(r.ok and r.shared_prefix for r in recs)
    hits = sim.result.prefix_hits_tokens
    assert 0 < hits <= 256 * 4  # later calls hit the prefix blocks, never more (answers are after the text)


def _agent_sim(tmp_path: Path, **kw: object) -> tuple[dict, list[RequestRecord]]:  # type: ignore[type-arg]
    args = SimArgs(profile=ROOT / "examples" / "agent.yaml", store=False, **kw)  # type: ignore[arg-type]
    out = run_sim(args)
    return out.summary, out.records


def test_sim_of_agent_profile_reports_sessions_by_step_and_is_seeded(tmp_path: Path) -> None:
    explicit = frozenset({"requests"})
    summary, recs = _agent_sim(tmp_path, requests=60, explicit=explicit)
    s = summary["sessions"]
    assert s["sessions"] >= 5
    assert s["failed"] == 0
    assert s["incomplete"] == 1  # requests=60 counts calls: the last session is cut before its end
    assert list(s["by_step"]) == ["plan", "search", "answer", "react/think", "react/act"]
    assert s["steps"]["min"] >= 6  # plan + ≥ 2 searches + answer + ≥ 1 think → act round
    assert summary["requests"]["completed"] == len(recs)
    _, again = _agent_sim(tmp_path, requests=60, explicit=explicit)
    assert again == recs  # same profile seed, same simulation
    cut, _ = _agent_sim(tmp_path, duration=6.0, explicit=frozenset({"duration"}))
    assert cut["sessions"]["incomplete"] >= 1  # the stop cuts the sessions in progress, as in bench
    # every call with an answer step reads the searches: its prompt is longer than its own text
    by_session: dict[str, list[RequestRecord]] = {}
    for r in recs:
        by_session.setdefault(r.session_id or "", []).append(r)
    for calls in by_session.values():
        calls.sort(key=lambda r: r.id)
        plan, rest = calls[0], calls[1:]
        assert all(r.scheduled_ns > _end(plan) for r in rest)  # every later call follows the plan


def test_sim_of_agent_profile_closed_loop(tmp_path: Path) -> None:
    summary, recs = _agent_sim(tmp_path, concurrency=2, requests=40, explicit=frozenset({"concurrency", "requests"}))
    assert len(recs) == 40
    assert all(r.ok for r in recs)
    assert summary["sessions"]["failed"] == 0


def _fanout_trace(k: int) -> list[Any]:
    """plan → (left ∥ right) → answer with 30 ms and 80 ms gaps; traces start 200 ms apart."""
    from tailscope.records import Span

    tid = f"{k + 1:032x}"
    t0 = 1_767_225_600_000_000_000 + k * 200 * MS

    def s(sid: str, name: str, a: int, b: int, n_in: int, n_out: int) -> Span:
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": n_in,
            "gen_ai.usage.output_tokens": n_out,
        }
        return Span(tid, f"{k:08x}{sid:0>8}", f"{k:08x}{'1':0>8}", name, t0 + a * MS, t0 + b * MS, service="agent",
                    kind="CLIENT", attributes=attrs, layer="inference")  # fmt: skip

    root = Span(tid, f"{k:08x}{'1':0>8}", None, "invoke_agent", t0, t0 + 1500 * MS, service="agent",
                attributes={"gen_ai.operation.name": "invoke_agent"}, layer="agent")  # fmt: skip
    return [
        root,
        s("2", "chat plan", 0, 300, 300, 16),
        s("3", "chat left", 330, 700, 200, 24),
        s("4", "chat right", 335, 650, 200, 24),
        s("5", "chat answer", 780, 1200, 500, 16),
    ]


def test_sim_from_traces_replays_each_trace_call_graph(tmp_path: Path) -> None:
    import json

    import tailscope
    from tailscope.trace.demo import to_otlp_json

    path = tmp_path / "fanout.otlp.json"
    path.write_text(json.dumps(to_otlp_json([s for k in range(3) for s in _fanout_trace(k)])) + "\n")
    db = tmp_path / "store.duckdb"
    tailscope.ingest_traces([path], set_name="fanout", store=db)
    res = tailscope.simulate(from_traces="fanout", traces_db=db)
    assert res.sessions is not None
    assert res.sessions["sessions"] == 3
    assert res.sessions["failed"] == 0
    assert res.summary_dict()["sessions"] == res.sessions
    assert res.run.settings["load"]["mode"] == "trace_load"
    recs: dict[str, list[RequestRecord]] = {}
    for r in res.records:
        recs.setdefault(r.session_id or "", []).append(r)
    for k, calls in enumerate(sorted(recs.values(), key=lambda c: min(r.scheduled_ns for r in c))):
        plan, left, right, answer = sorted(calls, key=lambda r: r.turn or 0)
        assert plan.scheduled_ns == k * 200 * MS  # sessions start at their traces' offsets
        assert left.scheduled_ns == _end(plan) + 30 * MS
        assert right.scheduled_ns == _end(plan) + 35 * MS
        assert max(left.scheduled_ns, right.scheduled_ns) < min(_end(left), _end(right))  # they overlap again
        assert answer.scheduled_ns == max(_end(left) + 80 * MS, _end(right) + 130 * MS)
        assert [r.input_tokens for r in (plan, left, right, answer)] == [300, 200, 200, 500]
    # --time-scale 0.5 halves the gaps
    fast = tailscope.simulate(from_traces="fanout", traces_db=db, time_scale=0.5)
    first = sorted((r for r in fast.records if r.turn is not None and r.turn <= 1), key=lambda r: r.id)[:2]
    assert first[1].scheduled_ns == _end(first[0]) + 15 * MS


def test_no_call_is_sent_after_the_stop() -> None:
    plan_end = _end(_by_id(list(Simulation(_cluster(), _graph(0, "g", 0)).run()))[0])
    stop_s = (plan_end + 7 * MS) / 1e9  # the first search is due before the stop, the others after it
    sim = Simulation(_cluster(), _graph(0, "g", 0), duration_s=stop_s)
    recs = _by_id(list(sim.run()))
    assert sorted(recs) == [0, 1]  # as bench: the session is cut (incomplete), nothing later is sent
    assert not sim._sessions  # the session's bookkeeping is gone
