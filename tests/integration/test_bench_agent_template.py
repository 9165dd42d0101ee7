"""An agent step's ``prompt_template`` over real loopback HTTP: the scripted server logs every body and tags every
response's text with its own id, so the test reads where each answer landed in the prompt that was sent.

Robust properties only (no timing): the answers sit exactly where the template puts them, in the calls' order for
``{{answer_N}}``, the step's own text sits at ``{{prompt}}``, a shared prefix stays in front, and the record's input
tokens are what was sent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.io.profile import load_profile
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.profile_stream import profile_requests

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SEED = 5

PROFILE = """\
name: templated
classes:
  - name: agent
    input_tokens: 12
    output_tokens: 4
    agent:
      steps:
        - {name: plan}
        - {name: search, fan_out: 2, gap_ms: 5}
        - name: answer
          use_answers: true
          prompt_template: "Second: {{answer_2}} First: {{answer_1}} Task: {{prompt}} All: {{answers}} End."
arrival: {mode: open, rate: 5}
stop: {requests: 12}
"""


def _content(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def _tags(text: str) -> list[str]:
    """The response ids in ``text``, in order, one per answer (``cmpl-3.0 cmpl-3.1 …`` → ``cmpl-3``)."""
    out: list[str] = []
    for w in text.split():
        if w.startswith("cmpl-") and w.endswith(".0"):
            out.append(w.removesuffix(".0"))
    return out


def test_answers_land_where_the_template_says(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE)
    specs = {s.id: s for s in profile_requests(load_profile(path), seed=SEED)}
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2, tag_answers=True)) as srv:
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED)
        bodies = list(srv.truth.bodies)
    recs = {r["id"]: r for r in json.loads(res.to_json())["requests"]}
    assert len(recs) == 12
    assert all(r["status"] == "ok" for r in recs.values())

    base = SEED * 1_000_003
    rid_of: dict[int, str] = {}
    sent: dict[int, str] = {}
    for i, body in enumerate(bodies):
        text = _content(body)
        seeds = [int(w) for w in text.split() if w.isdigit() and int(w) >= base]
        assert len(seeds) == 1, text  # the step's own text, once (it starts with its seed)
        rid_of[seeds[0] - base] = f"cmpl-{i}"
        sent[seeds[0] - base] = text
    assert set(sent) == set(recs)

    answers = [i for i, s in specs.items() if s.step == "answer"]
    assert len(answers) == 3
    for a in answers:
        first, second = (rid_of[s] for s in specs[a].answers_from)
        text = sent[a]
        shape = re.fullmatch(r"Second: (.*) First: (.*) Task: (\d+ .*) All: (.*) End\.", text, re.S)
        assert shape is not None, text
        assert _tags(shape[1]) == [second]
        assert _tags(shape[2]) == [first]
        assert _tags(shape[3]) == []  # the step's own text, and nothing else
        assert len(shape[3].split()) == 12
        assert _tags(shape[4]) == [first, second]  # {{answers}}: in the calls' order
        assert " ".join(f"{second}.{k}" for k in range(4)) in shape[1]  # the whole answer
        assert recs[a]["input_tokens"] == len(text.split()) == 12 + 4 * 4 + 5  # what was sent (5 literal words)


def test_a_shared_prefix_stays_in_front_of_the_template(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(PROFILE.replace("arrival:", "shared_prefix: {tokens: 8}\narrival:").replace("12}", "6}"))
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2, tag_answers=True)) as srv:
        res = tailscope.bench(srv.url, profile=path, metrics_url="off", seed=SEED)
        bodies = [_content(b) for b in srv.truth.bodies]
    assert all(r.ok for r in res.records)
    templated = [t for t in bodies if "Second:" in t]
    assert len(templated) == 1
    plan = bodies[0]
    head = " ".join(plan.split()[:8])
    assert head.startswith("System prompt variant 0.")
    text = templated[0]
    assert text.startswith(head + " Second: cmpl-")  # the agent's system prompt first, then the template
    assert len(text.split()) == 8 + 12 + 4 * 4 + 5  # the prefix, the step's own 12, two answers, 5 literal words
    assert max(r.input_tokens or 0 for r in res.records) == len(text.split())
