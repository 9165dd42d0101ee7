"""Trace replay: the three layouts, time scaling, sessions, and bad lines named by file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.errors import ProfileError
from tailscope.io.replay import parse_replay, read_replay
from tailscope.workload.replay import replay_requests


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_tailscope_jsonl_with_classes_sessions_and_time_scale(tmp_path: Path) -> None:
    rows = [
        {"timestamp_s": 10.0, "input_tokens": 100, "output_tokens": 20, "class": "chat", "session": "u1"},
        {"timestamp_s": 10.5, "input_tokens": 50, "output_tokens": 10},
        {"timestamp_s": 13.0, "input_tokens": 30, "output_tokens": 40, "class": "chat", "session": "u1"},
        {"timestamp_s": 14.0, "input_tokens": 30, "output_tokens": 40, "session": "u1", "think_time_s": 0.25},
    ]
    p = _write(tmp_path, "t.jsonl", [json.dumps(r) for r in rows])
    parsed = read_replay(p)
    assert [r.timestamp_s for r in parsed] == [0.0, 0.5, 3.0, 4.0]
    specs = list(replay_requests(parsed, seed=1, time_scale=0.5))
    assert [s.at_ns for s in specs] == [0, 250_000_000, None, None]
    assert [s.request_class for s in specs] == ["chat", "replay", "chat", "replay"]
    assert [s.turn for s in specs] == [0, None, 1, 2]
    # think time: the gap between the turns' timestamps (scaled), or the explicit think_time_s (scaled)
    assert [s.think_time_ns for s in specs] == [0, 0, 1_500_000_000, 125_000_000]
    assert [s.input_tokens for s in specs] == [100, 50, 30, 30]


def test_rows_are_sorted_and_limits_apply(tmp_path: Path) -> None:
    lines = [json.dumps({"timestamp_s": t, "input_tokens": 1, "output_tokens": 1}) for t in (3, 1, 2, 0, 5)]
    parsed = read_replay(_write(tmp_path, "t.jsonl", lines))
    assert [r.timestamp_s for r in parsed] == [0, 1, 2, 3, 5]
    specs = list(replay_requests(parsed, seed=0, duration_s=4.0, warmup=1))
    assert [s.at_ns for s in specs] == [0, 1e9, 2e9, 3e9]
    assert [s.warmup for s in specs] == [True, False, False, False]
    assert len(list(replay_requests(parsed, seed=0, max_requests=2))) == 2


def test_replay_timing_is_exact_at_any_scale(tmp_path: Path) -> None:
    ts = [0.0, 0.001, 0.0105, 1.25, 7.5]
    lines = [json.dumps({"timestamp_s": t + 100, "input_tokens": 5, "output_tokens": 5}) for t in ts]
    parsed = read_replay(_write(tmp_path, "t.jsonl", lines))
    for scale in (0.1, 1.0, 3.0):
        specs = list(replay_requests(parsed, seed=0, time_scale=scale))
        assert [s.at_ns for s in specs] == [round(t * scale * 1e9) for t in ts]


def test_mooncake_layout(tmp_path: Path) -> None:
    lines = [
        '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}',
        '{"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47, 48]}',
        '{"timestamp": 27482, "input_length": 300, "output_length": 0, "hash_ids": [9]}',
    ]
    parsed = read_replay(_write(tmp_path, "m.jsonl", lines))
    assert [r.timestamp_s for r in parsed] == [0.0, 10.535, 27.482]
    assert [r.output_tokens for r in parsed] == [52, 26, 1]  # a request asks for ≥ 1 token
    specs = list(replay_requests(parsed, seed=0, prefix_tokens=512))
    assert [s.prefix_id for s in specs] == [0, 0, 1]
    assert [s.prefix_tokens for s in specs] == [512, 512, 300]
    assert [s.prefix_id for s in replay_requests(parsed, seed=0)] == [None, None, None]


def test_azure_csv_layout(tmp_path: Path) -> None:
    lines = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,374,44",
        "2023-11-16 18:15:50.9951690,396,109",
        "2023-11-16 18:16:00.0000000,879,0",
    ]
    parsed = read_replay(_write(tmp_path, "AzureLLMInferenceTrace_conv.csv", lines))
    assert [r.timestamp_s for r in parsed] == pytest.approx([0.0, 4.314579, 13.31941])
    assert [(r.input_tokens, r.output_tokens) for r in parsed] == [(374, 44), (396, 109), (879, 1)]


@pytest.mark.parametrize(
    ("name", "lines", "match"),
    [
        (
            "t.jsonl",
            ['{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5}', "{oops"],
            r"t\.jsonl:2: not valid JSON",
        ),
        ("t.jsonl", ['{"timestamp_s": 0, "input_tokens": 5}'], r"t\.jsonl:1: missing 'output_tokens'"),
        (
            "t.jsonl",
            ['{"timestamp_s": -1, "input_tokens": 5, "output_tokens": 5}'],
            r"t\.jsonl:1: timestamp_s must be ≥ 0",
        ),
        (
            "t.jsonl",
            ['{"timestamp_s": 0, "input_tokens": "x", "output_tokens": 5}'],
            r"t\.jsonl:1: input_tokens must be a number",
        ),
        ("t.jsonl", ['{"timestamp_s": 0, "input_tokens": 2.5, "output_tokens": 5}'], r"whole number"),
        (
            "t.jsonl",
            ["", '{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5, "model": "m"}'],
            r"t\.jsonl:2: unknown field 'model' \(allowed: class, input_tokens",
        ),
        ("t.jsonl", ["[1, 2]"], r"t\.jsonl:1: a row must be a JSON object"),
        (
            "m.jsonl",
            [
                '{"timestamp": 0, "input_length": 5, "output_length": 5}',
                '{"timestamp": 1, "input_length": 0, "output_length": 5}',
            ],
            r"m\.jsonl:2: input_length must be ≥ 1",
        ),
        ("a.csv", ["TIMESTAMP,ContextTokens", "1,2"], r"a\.csv:1: missing column GeneratedTokens"),
        (
            "a.csv",
            ["TIMESTAMP,ContextTokens,GeneratedTokens", "0,5,5", "yesterday,5,5"],
            r"a\.csv:3: TIMESTAMP 'yesterday'",
        ),
        (
            "a.csv",
            ["TIMESTAMP,ContextTokens,GeneratedTokens", "0,5,many"],
            r"a\.csv:2: GeneratedTokens must be a whole number",
        ),
        ("e.jsonl", [""], r"e\.jsonl: the trace holds no requests"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, name: str, lines: list[str], match: str) -> None:
    with pytest.raises(ProfileError, match=match):
        read_replay(_write(tmp_path, name, lines))


def test_bad_time_scale_and_format(tmp_path: Path) -> None:
    p = _write(tmp_path, "t.jsonl", ['{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5}'])
    with pytest.raises(ProfileError, match="--time-scale must be > 0"):
        list(replay_requests(read_replay(p), seed=0, time_scale=0))
    with pytest.raises(ProfileError, match="--replay-format 'xml'"):
        read_replay(p, fmt="xml")
    with pytest.raises(ProfileError, match="cannot read the trace"):
        read_replay(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ('"input_tokens": true', r"t\.jsonl:1: input_tokens must be a number \(got True\)"),
        ('"input_tokens": 3, "class": ""', r"t\.jsonl:1: class must be a non-empty string"),
        ('"input_tokens": 3, "session": [1]', r"t\.jsonl:1: session must be a string or number \(got \[1\]\)"),
        ('"input_tokens": 3, "think_time_s": NaN', r"t\.jsonl:1: think_time_s must be a finite number"),
    ],
)
def test_row_types_are_checked_at_the_boundary(row: str, match: str) -> None:
    text = '{"timestamp_s": 0, "output_tokens": 5, ' + row + "}\n"
    with pytest.raises(ProfileError, match=match):
        parse_replay(text, source="t.jsonl")


def test_format_is_detected_from_the_name_and_first_row() -> None:
    csv_text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,10,0\n"
    (row,) = parse_replay(csv_text, source="trace.csv")
    assert (row.input_tokens, row.output_tokens) == (10, 1)
    (row,) = parse_replay('{"timestamp": 1500, "input_length": 7, "output_length": 2}\n', source="x.jsonl")
    assert (row.timestamp_s, row.input_tokens, row.output_tokens) == (0.0, 7, 2)
