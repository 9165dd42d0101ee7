"""Agent call graphs: the shapes drawn from a profile's ``agent`` block (fan-out and join, repeats, sub-agents), the
tool gaps, answer substitution links, seeding, and file:line errors for bad blocks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tailscope.errors import ConfigError, ProfileError
from tailscope.io.profile import load_profile, parse_profile
from tailscope.workload.agent import AgentGraph, AgentStep, draw_session, max_calls
from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import LengthDist, fixed
from tailscope.workload.profile_stream import profile_requests

ROOT = Path(__file__).resolve().parents[3]
MS = 1_000_000


def _draw(*steps: AgentStep, seed: int = 0) -> list:  # type: ignore[type-arg]
    return draw_session(AgentGraph(steps), random.Random(seed), input_tokens=fixed(100), output_tokens=fixed(10))


def test_sequence_fan_out_and_join() -> None:
    calls = _draw(
        AgentStep("plan"),
        AgentStep("search", fan_out=fixed(3), gap_ms=FloatDist("fixed", 40.0), input_tokens=fixed(50)),
        AgentStep("answer", use_answers=True, gap_ms=FloatDist("fixed", 5.0)),
    )
    assert [c.step for c in calls] == ["plan", "search", "search", "search", "answer"]
    assert calls[0].deps == ()
    for c in calls[1:4]:  # every branch waits for the plan, then its tool call
        assert c.deps == ((0, 40 * MS),)
        assert c.input_tokens == 50
        assert c.answers_from == ()
    assert calls[4].deps == ((1, 5 * MS), (2, 5 * MS), (3, 5 * MS))  # the join waits for every branch
    assert calls[4].answers_from == (1, 2, 3)
    assert (calls[4].input_tokens, calls[4].output_tokens) == (100, 10)  # the class's defaults


def test_repeat_is_a_chain_and_a_sub_agent_runs_inside_the_session() -> None:
    loop = AgentStep(
        "react",
        repeat=fixed(3),
        steps=(AgentStep("think"), AgentStep("act", gap_ms=FloatDist("fixed", 7.0), use_answers=True)),
        gap_ms=FloatDist("fixed", 2.0),
    )
    calls = _draw(AgentStep("plan"), loop, AgentStep("answer"))
    assert [c.step for c in calls] == ["plan", *["react/think", "react/act"] * 3, "answer"]
    assert calls[1].deps == ((0, 2 * MS),)  # the sub-agent's own gap comes before its first step
    for k in range(1, 7):  # strictly sequential: each call waits for the one before it
        assert [d for d, _ in calls[k].deps] == [k - 1]
    assert calls[2].deps == ((1, 7 * MS),)
    assert calls[2].answers_from == (1,)
    assert calls[3].deps == ((2, 2 * MS),)  # each round waits for the previous one, and its own gap
    assert calls[7].deps == ((6, 0),)


def test_fanned_out_sub_agents_run_in_parallel_and_join() -> None:
    sub = AgentStep("worker", fan_out=fixed(2), steps=(AgentStep("a"), AgentStep("b")))
    calls = _draw(AgentStep("plan"), sub, AgentStep("merge", use_answers=True))
    assert [c.step for c in calls] == ["plan", "worker/a", "worker/b", "worker/a", "worker/b", "merge"]
    assert [d for d, _ in calls[1].deps] == [0]
    assert [d for d, _ in calls[3].deps] == [0]  # the second branch does not wait for the first
    assert calls[5].answers_from == (2, 4)  # each branch's last call


def test_first_step_fan_out_has_no_deps() -> None:
    calls = _draw(AgentStep("start", fan_out=fixed(2)), AgentStep("end"))
    assert calls[0].deps == calls[1].deps == ()
    assert [d for d, _ in calls[2].deps] == [0, 1]


def test_same_seed_same_shapes_gaps_and_lengths() -> None:
    steps = (
        AgentStep("plan", input_tokens=LengthDist("lognormal", 500, 0.5)),
        AgentStep("search", fan_out=LengthDist("uniform", 1, 6), gap_ms=FloatDist("exponential", 30.0)),
        AgentStep("loop", repeat=LengthDist("uniform", 1, 4), steps=(AgentStep("t"),)),
    )
    runs = [_draw(*steps, seed=s) for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    shapes = {len(_draw(*steps, seed=s)) for s in range(40)}
    assert len(shapes) > 3  # fan-out and repeat really vary


def test_max_calls() -> None:
    g = AgentGraph((AgentStep("a", fan_out=LengthDist("uniform", 1, 4)), AgentStep("b", repeat=fixed(2))))
    assert max_calls(g) == 6
    assert max_calls(AgentGraph((AgentStep("a", fan_out=LengthDist("exponential", 3)),))) is None


def test_example_profile_streams_sessions_with_their_graph() -> None:
    p = load_profile(ROOT / "examples" / "agent.yaml")
    specs = list(profile_requests(p, seed=7))
    assert specs == list(profile_requests(p, seed=7))
    by_session: dict[str, list] = {}  # type: ignore[type-arg]
    for s in specs:
        assert s.session_id is not None
        by_session.setdefault(s.session_id, []).append(s)
    assert len(by_session) > 20
    for calls in by_session.values():
        first = calls[0]
        assert first.turn == 0
        assert first.at_ns is not None
        assert first.step == "plan"
        ids = {c.id for c in calls}
        for c in calls[1:]:
            assert c.at_ns is None
            assert c.after
            assert all(d in ids and d < c.id for d, _ in c.after)  # dependencies inside the session, earlier
            assert set(c.answers_from) <= {d for d, _ in c.after}
            assert c.prefix_id == 0  # the system prompt on every call
        answer = next(c for c in calls if c.step == "answer")
        searches = [c.id for c in calls if c.step == "search"]
        assert 2 <= len(searches) <= 4
        assert [d for d, _ in answer.after] == searches
        assert answer.answers_from == tuple(searches)


def test_stop_requests_cuts_the_stream() -> None:
    text = (ROOT / "examples" / "agent.yaml").read_text().replace("stop: {duration_s: 60}", "stop: {requests: 25}")
    specs = list(profile_requests(parse_profile(text), seed=1))
    assert len(specs) == 25
    assert [s.id for s in specs] == list(range(25))


BASE = """\
name: t
classes:
  - name: a
    input_tokens: 10
    output_tokens: 5
    agent:
      steps:
        - {name: plan}
        - name: tools
          fan_out: 3
          gap_ms: 50
arrival: {rate: 4}
stop: {requests: 50}
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("fan_out: 3", "fan_out: 0", "profile.yaml:10: classes[0].agent.steps[1].fan_out.value must be ≥ 1 call"),
        ("fan_out: 3", "fan_out: lognormal:3:1", "profile.yaml:6: classes[0].agent a session may have at most"),
        ("gap_ms: 50", "gap_ms: -5", "profile.yaml:11: classes[0].agent.steps[1].gap_ms.value must be ≥ 0"),
        ("gap_ms: 50", "gap_mss: 50", "profile.yaml:11: classes[0].agent.steps[1].gap_mss is not a known field"),
        ("- {name: plan}", "- {name: tools}", "profile.yaml:9: classes[0].agent.steps[1].name must be unique"),
        ("- {name: plan}", "- {name: a/b}", "profile.yaml:8: classes[0].agent.steps[0].name must not contain '/'"),
        ("fan_out: 3", "steps: []", "profile.yaml:10: classes[0].agent.steps[1].steps a sub-agent lists at least"),
        ("    agent:\n", "    session: {turns: 2}\n    agent:\n", "profile.yaml:7: classes[0].agent a class is a"),
    ],
)
def test_bad_agent_blocks_name_file_line_and_field(old: str, new: str, expected: str) -> None:
    text = BASE.replace(old, new)
    assert text != BASE
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="profile.yaml")
    assert str(info.value).startswith(expected), str(info.value)


def test_the_docs_example_is_the_example_file() -> None:
    doc = (ROOT / "docs" / "workload.md").read_text()
    section = doc[doc.index("## Agentic sessions") :]
    block = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml\n") + 8)]
    assert parse_profile(block) == parse_profile((ROOT / "examples" / "agent.yaml").read_text())


def test_every_step_is_checked_against_the_served_context() -> None:
    from tailscope.runner.options import BenchOptions
    from tailscope.runner.preflight import check_context
    from tailscope.runner.resolve import resolve

    cfg = resolve(BenchOptions(url="http://127.0.0.1:9", profile=str(ROOT / "examples" / "agent.yaml"))).config
    labels = [b.label.split(": ", 1)[1] for b in cfg.lengths]
    assert labels == [
        "class agent",
        "class agent step plan",
        "class agent step search",
        "classes[0].agent.steps[2].prompt_template (class agent step answer)",  # it has a template: where it is
        "class agent step react/think",
        "class agent step react/act",
    ]
    plan = cfg.lengths[1]
    assert (plan.input_tokens.kind, plan.output_tokens.a) == ("lognormal", 64)
    with pytest.raises(ConfigError, match="class agent step plan: a typical request"):
        check_context(cfg.lengths, 900, "m")  # the class's own lengths fit; the plan step's do not


def test_a_prompt_template_that_pushes_a_step_over_the_served_context_is_refused_at_its_line(tmp_path: Path) -> None:
    """A step's ``prompt_template`` text is sent on top of its prompt: the context check counts it (as a dataset's
    prompts are counted: about four characters a token without ``--tokenizer``) and names the template's
    file:line:field. The same step without the long text fits."""
    from tailscope.runner.options import BenchOptions
    from tailscope.runner.preflight import check_context
    from tailscope.runner.resolve import resolve

    words = "please read every result below with great care " * 60  # 2,820 characters ≈ 705 tokens
    text = (
        "name: t\n"
        "classes:\n"
        "  - name: agent\n"
        "    input_tokens: 200\n"
        "    output_tokens: 50\n"
        "    agent:\n"
        "      steps:\n"
        "        - {name: fetch, fan_out: 2}\n"
        "        - name: answer\n"
        "          use_answers: true\n"
        f'          prompt_template: "{words}{{{{answers}}}}"\n'
        "arrival: {mode: open, rate: 1}\n"
        "stop: {requests: 3}\n"
    )
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    cfg = resolve(BenchOptions(url="http://127.0.0.1:9", profile=str(path))).config
    bound = cfg.lengths[-1]
    assert bound.extra_input_tokens == round(len(words) / 4)
    with pytest.raises(ConfigError) as info:
        check_context(cfg.lengths, 900, "m")  # 200 + 50 fits; with the template's ≈ 705 tokens it does not
    msg = str(info.value)
    assert msg.startswith(f"{path}:11: classes[0].agent.steps[1].prompt_template (class agent step answer): "), msg
    assert "prompt_template text ≈ 705" in msg
    assert check_context(cfg.lengths, 2000, "m") == ()
    short = tmp_path / "short.yaml"
    short.write_text(text.replace(words, "Results: "))
    assert (
        check_context(resolve(BenchOptions(url="http://127.0.0.1:9", profile=str(short))).config.lengths, 900, "m")
        == ()
    )


def test_console_prints_incomplete_sessions_and_time_by_step() -> None:
    import io

    from rich.console import Console

    from tailscope.report.console import sessions_line, steps_table

    stats = {"p50": 120.0, "p99": 250.0, "max": 300.0, "mean": 3.0, "count": 4}
    s = {"sessions": 9, "failed": 1, "incomplete": 2, "duration_ms": stats, "step_ms": stats, "steps": stats,
         "by_step": {"plan": stats, "react/think": {"p50": 40.0, "p99": 90.0, "count": 8}}}  # fmt: skip
    assert sessions_line(s).startswith("sessions 9  failed 1  incomplete 2  duration p50 120")
    assert "incomplete" not in sessions_line({**s, "incomplete": 0})
    out = io.StringIO()
    Console(file=out, width=100).print(steps_table(s["by_step"]))
    rows = [[w for w in line.split() if w != "│"] for line in out.getvalue().splitlines()]
    assert ["plan", "4", "120.0", "ms", "250.0", "ms", "300.0", "ms"] in rows
    assert any(r[:2] == ["react/think", "8"] for r in rows)
