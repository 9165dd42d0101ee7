"""Datasets: every format read into rows, bad rows named by file:line and field, and their request streams."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tailscope.errors import ProfileError
from tailscope.io.datasets import approx_tokens, filter_rows, parse_dataset_ref, read_dataset
from tailscope.runner.dataset_load import conversations_of
from tailscope.workload.datasets import dataset_requests
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "What is a KV cache?"},
                                  {"from": "gpt", "value": "It stores keys and values " * 10},
                                  {"from": "human", "value": "And paging?"},
                                  {"from": "gpt", "value": "Blocks."}]},
    {"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Hi"}]},
    {"id": "c", "conversations": [{"from": "gpt", "value": "no human here"}]},
]  # fmt: skip


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_sharegpt_first_turn_and_all_turns(tmp_path: Path) -> None:
    p = write(tmp_path / "sg.json", json.dumps(SHAREGPT))
    first = read_dataset(f"sharegpt:{p}")
    assert [r.prompt for r in first.rows] == ["What is a KV cache?", "Hi"]  # c has no human turn: skipped
    assert first.rows[0].reference is not None
    assert first.rows[0].reference.startswith("It stores")
    assert first.rows[0].turns == ()
    allturns = read_dataset(f"sharegpt:{p}", turns="all")
    assert allturns.rows[0].turns == (("And paging?", "Blocks."),)
    convs = conversations_of(allturns.rows)
    assert [len(c) for c in convs] == [2, 1]


def test_jsonl_rows_chat_and_completion_with_their_fields(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}], "max_tokens": 7},
        {"prompt": "complete me", "class": "short"},
        {"prompt": "turn 1", "session": "x", "turn": 1},
        {"prompt": "turn 0", "session": "x", "turn": 0},
    ]
    p = write(tmp_path / "d.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    ds = read_dataset(f"jsonl:{p}")
    assert ds.rows[0].messages == (("system", "s"), ("user", "u1"))
    assert ds.rows[0].max_tokens == 7
    assert ds.rows[1].request_class == "short"
    convs = conversations_of(ds.rows)
    assert [t.prompt for t in convs[2]] == ["turn 0", "turn 1"]  # the session, in turn order


def test_text_and_csv_and_refs(tmp_path: Path) -> None:
    t = write(tmp_path / "p.txt", "first prompt\n\nsecond prompt\n")
    assert [r.prompt for r in read_dataset(f"text:{t}").rows] == ["first prompt", "second prompt"]
    c = write(tmp_path / "q.csv", "id,question\n1,why?\n2,\n3,how?\n")
    assert [r.prompt for r in read_dataset(f"csv:question:{c}").rows] == ["why?", "how?"]
    assert parse_dataset_ref(f"csv:question:{c}") == ("csv", "question", c)
    with pytest.raises(ProfileError, match="no column 'answer'"):
        read_dataset(f"csv:answer:{c}")
    with pytest.raises(ProfileError, match="expected FORMAT:PATH"):
        read_dataset("yaml:x.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"prompt": "ok"}\n{"prompt": 5}\n', "d.jsonl:2: prompt must be text"),
        ('{"prompt": "ok"}\n{"nothing": 1}\n', "d.jsonl:2: a row needs messages"),
        ('{"prompt": "ok"}\nnot json\n', "d.jsonl:2: not JSON"),
        ('{"prompt": "ok", "max_tokens": 0}\n', "d.jsonl:1: max_tokens must be an integer ≥ 1"),
        ('{"messages": [{"content": "x"}]}\n', "d.jsonl:1: messages[0] must be an object with role"),
        ('{"prompt": "ok", "timestamp_s": -1}\n', "d.jsonl:1: timestamp_s"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, text: str, needle: str) -> None:
    p = write(tmp_path / "d.jsonl", text)
    with pytest.raises(ProfileError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        read_dataset(f"jsonl:{p}")


def test_non_utf8_dataset_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.txt"
    p.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(ProfileError, match=r"bad.txt:2: the dataset is not UTF-8"):
        read_dataset(f"text:{p}")


def test_parquet_dataset_read_with_duckdb(tmp_path: Path) -> None:
    import duckdb

    p = tmp_path / "train.parquet"
    duckdb.connect().execute(
        f"COPY (SELECT * FROM (VALUES ('a question', 1), ('another', 2)) t(question, id)) TO '{p}' (FORMAT parquet)"  # noqa: S608
    )
    assert [r.prompt for r in read_dataset(f"parquet:{p}").rows] == ["a question", "another"]


def test_length_filters_and_sampling_with_replacement(tmp_path: Path) -> None:
    p = write(tmp_path / "p.txt", "short\n" + "a much longer prompt " * 20 + "\nmedium prompt here\n")
    rows = read_dataset(f"text:{p}").rows
    assert len(filter_rows(rows, min_tokens=3, max_tokens=None)) == 2
    kept = filter_rows(rows, min_tokens=None, max_tokens=10)
    convs = conversations_of(kept)
    shape = LoadShape(concurrency=2, requests=7)
    seq = list(dataset_requests(convs, shape, seed=1, sample="sequential", count=approx_tokens))
    assert [s.prompt for s in seq] == ["short", "medium prompt here"] * 3 + ["short"]  # repeats only past the end
    rnd = list(dataset_requests(convs, shape, seed=1, sample="random", count=approx_tokens))
    assert sorted(s.prompt or "" for s in rnd[:2]) == sorted(["short", "medium prompt here"])  # each once first
    assert all(s.output_tokens == 128 for s in seq)  # no reference, no --output-tokens: the default
    fixed_out = list(dataset_requests(convs, shape, seed=1, output_tokens=fixed(9), count=approx_tokens))
    assert {s.output_tokens for s in fixed_out} == {9}


def test_timed_rows_are_a_replay_with_content(tmp_path: Path) -> None:
    rows = [{"prompt": "b", "timestamp_s": 2.0}, {"prompt": "a", "timestamp_s": 0.5}]
    p = write(tmp_path / "t.jsonl", "\n".join(json.dumps(r) for r in rows))
    convs = conversations_of(read_dataset(f"jsonl:{p}").rows)
    specs = list(dataset_requests(convs, LoadShape(requests=2), seed=0, count=approx_tokens, time_scale=0.5))
    assert [(s.prompt, s.at_ns) for s in specs] == [("a", 250_000_000), ("b", 1_000_000_000)]


def test_arrow_dataset_of_a_hugging_face_cache_read_with_duckdb(tmp_path: Path) -> None:
    """A ``datasets`` cache shard is an Arrow IPC stream: its ``conversations`` (ShareGPT) or a named text column are
    read like a Parquet shard's; the IPC file format too. pyarrow is the ``arrow`` extra (installed with ``test``)."""
    try:
        import pyarrow as pa
        import pyarrow.ipc
    except ImportError:  # the test extra installs it: CI must run this
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("the arrow extra (pip install 'tailscope[arrow]')")

    convs = [[{"from": "human", "value": "What is paging?"}, {"from": "gpt", "value": "Blocks of KV cache."}],
             [{"from": "human", "value": "And prefix caching?"}, {"from": "gpt", "value": "Reuse."}]]  # fmt: skip
    table = pa.table({"id": ["a", "b"], "conversations": convs, "question": ["q1", "q2"]})
    stream = tmp_path / "data-00000-of-00001.arrow"
    with pa.OSFile(str(stream), "wb") as sink, pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    rows = read_dataset(f"arrow:{stream}").rows
    assert [r.prompt for r in rows] == ["What is paging?", "And prefix caching?"]
    assert rows[0].reference == "Blocks of KV cache."
    assert [r.prompt for r in read_dataset(f"arrow:question:{stream}").rows] == ["q1", "q2"]
    feather = tmp_path / "t.arrow"
    with pa.OSFile(str(feather), "wb") as sink, pyarrow.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    assert [r.prompt for r in read_dataset(f"arrow:question:{feather}").rows] == ["q1", "q2"]
    bad = write(tmp_path / "bad.arrow", "not arrow")
    with pytest.raises(ProfileError, match=r"bad\.arrow: cannot read it as Arrow"):
        read_dataset(f"arrow:{bad}")
    with pytest.raises(ProfileError, match=r"no column answer .*name it: arrow:COLUMN:PATH"):
        read_dataset(f"arrow:answer:{stream}")


def test_arrow_without_pyarrow_is_one_line_saying_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_pyarrow(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    p = write(tmp_path / "d.arrow", "x")
    with pytest.raises(
        ProfileError, match=r"d\.arrow: reading Arrow files needs pyarrow: pip install 'tailscope\[arrow\]'"
    ):
        read_dataset(f"arrow:{p}")
