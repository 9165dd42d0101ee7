"""A profile class's own dataset (``dataset: FORMAT:PATH``): rows read when the profile loads, sent one per arrival
in a seeded order that repeats rows only past the end, and the profile errors that name file:line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.errors import ProfileError
from tailscope.io.profile import load_profile
from tailscope.workload.profile_stream import profile_requests

ROWS = [{"prompt": f"question {i}", "max_tokens": 10 + i} for i in range(4)] + [
    {"messages": [{"role": "user", "content": "chat row"}]}
]


def _profile(tmp_path: Path, classes: str) -> Path:
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nclasses:\n{classes}arrival: {{mode: open, rate: 5}}\nstop: {{requests: 12}}\n")
    return path


def test_rows_are_sent_in_a_seeded_order_that_repeats_only_past_the_end(tmp_path: Path) -> None:
    path = _profile(tmp_path, "  - {name: q, dataset: 'jsonl:q.jsonl', output_tokens: 7}\n")
    p = load_profile(path)
    (cls,) = p.classes
    assert cls.dataset is not None
    assert len(cls.dataset.prompts) == 5
    assert cls.input_tokens.kind == "empirical"  # the rows' lengths, for the context check and display
    specs = list(profile_requests(p, seed=1))
    sent = [s.prompt or (s.messages or (("", ""),))[0][1] for s in specs]
    assert sorted(sent[:5]) == sorted(sent[5:10]) == sorted([*(f"question {i}" for i in range(4)), "chat row"])
    assert sent == [s.prompt or (s.messages or (("", ""),))[0][1] for s in profile_requests(p, seed=1)]
    # a row's own max_tokens wins; the chat row has none, so the class's output_tokens
    assert {(s.prompt, s.output_tokens) for s in specs if s.prompt} == {(f"question {i}", 10 + i) for i in range(4)}
    assert {s.output_tokens for s in specs if s.messages} == {7}
    assert all(s.prefix_id is None and s.session_id is None for s in specs)


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        ("  - {name: q, dataset: 'jsonl:q.jsonl', input_tokens: 5}\n",
         "p.yaml:3: classes[0].input_tokens a class with a dataset sends the dataset's prompts"),
        ("  - {name: q, dataset: 'jsonl:q.jsonl', session: {turns: 2}}\n",
         "p.yaml:3: classes[0].session a class with a dataset"),
        ("  - {name: q, output_tokens: 5}\n", "p.yaml:3: classes[0].input_tokens is required (or give the class a"),
        ("  - {name: q, dataset: 'jsonl:missing.jsonl'}\n", "p.yaml:3: classes[0].dataset "),
        ("  - {name: q, dataset: 'yaml:q.jsonl'}\n", "p.yaml:3: classes[0].dataset --dataset 'yaml:q.jsonl': expected"),
    ],
)  # fmt: skip
def test_bad_class_datasets_name_file_line_and_field(tmp_path: Path, classes: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(_profile(tmp_path, classes))
    assert str(info.value).startswith(str(tmp_path / expected)) or str(info.value).startswith(expected), str(info.value)


def test_a_bad_row_names_the_dataset_line(tmp_path: Path) -> None:
    path = _profile(tmp_path, "  - {name: q, dataset: 'jsonl:bad.jsonl'}\n")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n{"prompt": 5}\n')
    with pytest.raises(ProfileError, match=r"classes\[0\]\.dataset .*bad\.jsonl:2: prompt must be text"):
        load_profile(path)
