"""Datasets over real sockets: the server (which logs every request body) receives the rows verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tailscope
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration

SHAREGPT = [
    {"id": str(i), "conversations": [{"from": "human", "value": f"question number {i} about batching?"},
                                     {"from": "gpt", "value": "word " * (5 + i)}]}
    for i in range(6)
]  # fmt: skip


def test_sharegpt_prompts_arrive_as_user_messages_with_reference_lengths(tmp_path: Path) -> None:
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(SHAREGPT))
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, dataset=f"sharegpt:{p}", requests=6, concurrency=2, dataset_sample="sequential",
                              metrics_url="off")  # fmt: skip
        bodies = list(srv.truth.bodies)
    assert res.summary.requests.completed == 6
    got = sorted((b["messages"][0]["content"], b["max_tokens"]) for b in bodies)
    want = sorted((c["conversations"][0]["value"], max(1, round(len(c["conversations"][1]["value"]) / 4)))
                  for c in SHAREGPT)  # fmt: skip
    assert got == want  # the first human turn verbatim; max_tokens from the reference answer's length
    assert all(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in bodies)
    assert res.run.settings["dataset_rows"] == 6


def test_jsonl_chat_rows_are_sent_verbatim_with_their_max_tokens(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"hello {i}"}],
         "max_tokens": 3 + i}
        for i in range(4)
    ]  # fmt: skip
    p = tmp_path / "chat.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, dataset=f"jsonl:{p}", requests=4, dataset_sample="sequential", metrics_url="off")
        bodies = list(srv.truth.bodies)
    assert [(b["messages"], b["max_tokens"]) for b in bodies] == [(r["messages"], r["max_tokens"]) for r in rows]
    assert [r.output_tokens for r in sorted(res.records, key=lambda r: r.id)] == [3, 4, 5, 6]


def test_a_multi_turn_sharegpt_conversation_is_one_session(tmp_path: Path) -> None:
    turns = [("human", "first"), ("gpt", "a b"), ("human", "second"), ("gpt", "c d")]
    conv = [{"id": "s", "conversations": [{"from": who, "value": text} for who, text in turns]}]
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(conv))
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, dataset=f"sharegpt:{p}", dataset_turns="all", requests=2, metrics_url="off")
        bodies = list(srv.truth.bodies)
    assert [r.turn for r in sorted(res.records, key=lambda r: r.id)] == [0, 1]
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]  # the model's own answer in the history
    assert (second[0]["content"], second[2]["content"]) == ("first", "second")


def test_a_profile_class_draws_its_prompts_from_its_own_dataset(tmp_path: Path) -> None:
    """Per class in a profile: the ``faq`` class sends its JSONL chats verbatim with their ``max_tokens`` and the
    ``qa`` class its ShareGPT questions (a path relative to the profile, ``max_tokens`` from the reference answer),
    while the ``synthetic`` class keeps generated prompts — one run, one mix."""
    faq = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"faq {i}?"}],
         "max_tokens": 3 + i}
        for i in range(3)
    ]  # fmt: skip
    (tmp_path / "faq.jsonl").write_text("\n".join(json.dumps(r) for r in faq) + "\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sg.json").write_text(json.dumps(SHAREGPT))
    profile = tmp_path / "mix.yaml"
    profile.write_text(
        "name: mix\n"
        "classes:\n"
        f"  - {{name: faq, dataset: 'jsonl:{tmp_path / 'faq.jsonl'}'}}\n"
        "  - {name: qa, dataset: 'sharegpt:data/sg.json'}\n"
        "  - {name: synthetic, input_tokens: 12, output_tokens: 5}\n"
        "arrival: {mode: closed, concurrency: 2}\n"
        "stop: {requests: 30}\n"
    )
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1)) as srv:
        res = tailscope.bench(srv.url, profile=profile, metrics_url="off", seed=3)
        bodies = list(srv.truth.bodies)
    assert res.summary.requests.completed == 30
    counts = {c: sum(r.request_class == c for r in res.records) for c in ("faq", "qa", "synthetic")}
    assert all(counts.values())
    sent = [(b["messages"], b["max_tokens"]) for b in bodies]
    faq_sent = [s for s in sent if s[0][0]["role"] == "system"]
    assert faq_sent
    assert all(s in [(r["messages"], r["max_tokens"]) for r in faq] for s in faq_sent)  # verbatim, with max_tokens
    questions = {c["conversations"][0]["value"]: max(1, round(len(c["conversations"][1]["value"]) / 4))
                 for c in SHAREGPT}  # fmt: skip
    qa_sent = [s for s in sent if s[0][0]["content"] in questions]
    assert qa_sent
    assert all(s[1] == questions[s[0][0]["content"]] for s in qa_sent)  # max_tokens from the reference answer
    assert len(faq_sent) == counts["faq"]
    assert len(qa_sent) == counts["qa"]
    assert len(sent) - len(faq_sent) - len(qa_sent) == counts["synthetic"]  # the rest: generated text, 5 tokens
    assert {b["max_tokens"] for b in bodies if b["messages"][0]["content"] not in questions
            and b["messages"][0]["role"] == "user"} == {5}  # fmt: skip
    faq_ref = f"jsonl:{tmp_path / 'faq.jsonl'}"
    assert res.run.settings["class_datasets"] == {"faq": faq_ref, "qa": "sharegpt:data/sg.json"}
