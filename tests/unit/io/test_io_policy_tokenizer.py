"""Autoscale policy and tokenizer files: parsed at the edge, every mistake one line naming file:line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tailscope.engine.autoscaler import AutoscalePolicy
from tailscope.errors import ConfigError
from tailscope.io.autoscaler import load_policy, parse_policy
from tailscope.io.tokenizer import load_tokenizer
from tailscope.workload.prompts import PromptSynthesizer


def test_policy_defaults_and_values() -> None:
    assert parse_policy("metric: running\n") == AutoscalePolicy(metric="running")
    p = parse_policy("metric: kv_usage\ntarget: 0.8\nmin_replicas: 2\nmax_replicas: 6\nwindow_s: 30\n")
    assert (p.metric, p.target, p.min_replicas, p.max_replicas, p.window_s) == ("kv_usage", 0.8, 2, 6, 30.0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("metric: running\ntarget: 0\n", r"^p\.yaml:2: target must be > 0 \(got 0\)"),
        ("metric: gpu_temp\n", r"^p\.yaml:1: metric must be one of queue_depth, running, kv_usage, ttft_p99 \(got"),
        ("min_replicas: 1.5\n", r"^p\.yaml:1: min_replicas must be a whole number \(got 1\.5\)"),
        (
            "metric: running\n\nmetrik: x\n",
            r"^p\.yaml:3: unknown field 'metrik' \(allowed: cold_start_s, engine",
        ),
        ("min_replicas: 3\nmax_replicas: 2\n", r"^p\.yaml:2: max_replicas must be ≥ min_replicas \(got 2 < 3\)"),
        ("target: lots\n", r"^p\.yaml:1: target must be a number \(got 'lots'\)"),
        ("- 1\n", r"^p\.yaml:1: an autoscale policy is a mapping"),
        ("metric: [\n", r"^p\.yaml:2: not valid YAML"),
    ],
)
def test_policy_mistakes_name_the_line(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_policy(text, source="p.yaml")


def test_policy_file_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read the autoscale policy"):
        load_policy(tmp_path / "nope.yaml")


def _tokenizer_file(path: Path) -> Path:
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "of": 2, "and": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def test_tokenizer_file_or_folder_gives_exact_prompts(tmp_path: Path) -> None:
    f = _tokenizer_file(tmp_path / "tokenizer.json")
    for ref in (f, tmp_path):
        synth = PromptSynthesizer(load_tokenizer(ref))
        assert synth.exact
        assert synth.count("the of and") == 3
    assert not PromptSynthesizer().exact


def test_tokenizer_mistakes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no tokenizer\.json there"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "tokenizer.json"
    bad.write_bytes(b'{"version": "1.0",\n"x": "\xe9"}')
    with pytest.raises(ConfigError, match=r"tokenizer\.json:2: the tokenizer is not UTF-8 text"):
        load_tokenizer(bad)
    bad.write_text('{"version": "1.0"}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"--tokenizer .*tokenizer\.json: cannot load it"):
        load_tokenizer(bad)
