"""An agent step's ``prompt_template``: parsing, rendering, its length in tokens, and the profile's checks (one
line naming file:line and the field)."""

from __future__ import annotations

import re

import pytest

from tailscope.errors import ProfileError
from tailscope.io.profile import parse_profile
from tailscope.workload.agent import AgentGraph, AgentStep, most_waited_for
from tailscope.workload.answer_template import parse_template
from tailscope.workload.lengths import fixed
from tailscope.workload.profile_stream import profile_requests


def test_render_places_each_placeholder() -> None:
    t = parse_template("Results:\n{{answers}}\nFirst: {{answer_1}} third: {{ answer_3 }}\nTask: {{prompt}}")
    assert t.highest_answer == 3
    out = t.render("do it", ["a b", "c", "d e f"])
    assert out == "Results:\na b\n\nc\n\nd e f\nFirst: a b third: d e f\nTask: do it"
    # a session that drew fewer answers places nothing for the missing ones
    assert t.render("do it", ["a b"]) == "Results:\na b\nFirst: a b third: \nTask: do it"


def test_tokens_count_each_placeholder_and_the_literal_words() -> None:
    t = parse_template("Results: {{answers}} again {{answer_2}} task {{prompt}} {{prompt}}")
    # literal words: Results: again task = 3; answers 4+6, answer_2 6, prompt twice 10
    assert t.tokens(10, [4, 6]) == 3 + 10 + 6 + 20
    assert t.tokens(10, [4]) == 3 + 4 + 0 + 20
    # the estimate is the rendered text's word count when each token is a word (the approximate prompt mode)
    text = t.render(" ".join(["w"] * 10), [" ".join(["x"] * 4), " ".join(["y"] * 6)])
    assert len(text.split()) == t.tokens(10, [4, 6])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{answer}}", "unknown placeholder {{answer}}"),
        ("{{Prompt}} {{answers}}", "unknown placeholder {{Prompt}}"),
        ("{{answer_0}}", "answers count from 1"),
        ("{{answers}} {{prompt}", "stray '{{'"),
        ("{{answers}} }}", "stray '}}'"),
        ("just {{prompt}}", "places no answer"),
    ],
)
def test_bad_templates_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_template(text)


def test_most_waited_for_follows_fan_out_repeat_and_sub_agents() -> None:
    graph = AgentGraph(
        (
            AgentStep("plan"),
            AgentStep("search", fan_out=fixed(3)),
            AgentStep("sub", fan_out=fixed(2), steps=(AgentStep("a"), AgentStep("b", fan_out=fixed(2)))),
            AgentStep("merge", repeat=fixed(2), fan_out=fixed(5)),
        )
    )
    assert most_waited_for(graph) == {"plan": 0, "search": 1, "sub/a": 3, "sub/b": 1, "merge": 5}


BASE = """\
name: t
classes:
  - name: agent
    input_tokens: 10
    output_tokens: 4
    agent:
      steps:
        - {name: plan}
        - name: search
          fan_out: 3
        - name: answer
          use_answers: true
          prompt_template: "Notes: {{answers}} Task: {{prompt}}"
arrival: {rate: 4}
stop: {requests: 50}
"""


def test_the_template_travels_to_the_request() -> None:
    p = parse_profile(BASE)
    specs = list(profile_requests(p, seed=1))[:5]
    assert [s.prompt_template for s in specs] == [None, None, None, None, "Notes: {{answers}} Task: {{prompt}}"]
    assert specs[4].answers_from == (1, 2, 3)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("{{answers}} Task", "{{answer}} Task", "profile.yaml:13: classes[0].agent.steps[2].prompt_template unknown"),
        ("{{answers}} Task", "{{answer_4}} Task", "profile.yaml:13: classes[0].agent.steps[2].prompt_template {{ans"),
        ("Notes: {{answers}} ", "", "profile.yaml:13: classes[0].agent.steps[2].prompt_template places no answer"),
        ("          use_answers: true\n", "", "profile.yaml:12: classes[0].agent.steps[2].prompt_template places the"),
        ("- {name: plan}", '- {name: plan, use_answers: true, prompt_template: "{{answers}}"}', "profile.yaml:8: "),
        ("fan_out: 3", 'steps: [{name: s}]\n          prompt_template: "{{answers}}"', "profile.yaml:11: "),
    ],
)
def test_bad_templates_name_file_line_and_field(old: str, new: str, expected: str) -> None:
    text = BASE.replace(old, new)
    assert text != BASE
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="profile.yaml")
    assert str(info.value).startswith(expected), str(info.value)
