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
