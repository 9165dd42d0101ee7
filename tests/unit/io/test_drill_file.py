"""Drill files and proxy rules at the boundary: valid files parse into the typed spec, bad ones fail in one line
naming ``file:line: field`` before anything is sent."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tailscope.errors import ConfigError
from tailscope.io.drill import load_drill, parse_drill
from tailscope.io.proxy_rules import Latency, parse_latency, parse_rules, rule_from_dict, rules_from_flags

ISSUE_EXAMPLE = """\
name: llm-down
target: {url: "http://127.0.0.1:8080", endpoint: chat}
load: {rate: 4, duration_s: 20, output_tokens: 32}
fault: {at_s: 5, for_s: 8, kind: llm-down}
expect: {error_rate_max: 0.01, e2e_p95_max_ms: 2000, recovered_within_s: 5}
"""


def test_the_issue_example_parses() -> None:
    spec = parse_drill(ISSUE_EXAMPLE, source="d.yaml")
    assert spec.name == "llm-down"
    assert spec.url == "http://127.0.0.1:8080"
    assert (spec.load.rate, spec.load.duration_s, spec.load.output_tokens) == (4, 20, 32)
    assert (spec.fault.kind, spec.fault.at_s, spec.fault.for_s, spec.fault.end_s) == ("llm-down", 5, 8, 13)
    assert spec.expect.error_rate_max == 0.01
    assert spec.expect.recovered_within_s == 5
    assert spec.step_s == 1.0


def test_a_proxy_fault_carries_its_validated_rule() -> None:
    text = ISSUE_EXAMPLE.replace(
        "fault: {at_s: 5, for_s: 8, kind: llm-down}",
        "fault:\n  at_s: 5\n  for_s: 8\n  kind: proxy\n  proxy: http://127.0.0.1:9001\n"
        "  rule: {name: slow, latency: {dist: uniform, min_ms: 100, max_ms: 300}}",
    )
    spec = parse_drill(text, source="d.yaml")
    assert spec.fault.proxy == "http://127.0.0.1:9001"
    assert spec.fault.rule == {
        "name": "slow",
        "share": 1.0,
        "latency": {"dist": "uniform", "min_ms": 100.0, "max_ms": 300.0},
    }


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("kind: llm-down", "kind: llm-gone", "d.yaml:4: fault kind must be one of llm-down"),
        ("rate: 4", "rate: -4", "d.yaml:3: load.rate must be > 0"),
        ("error_rate_max: 0.01", "error_rate_maxx: 0.01", "d.yaml:5: unknown field 'expect.error_rate_maxx'"),
        ("for_s: 8", "for_s: 30", "d.yaml:3: the fault ends at 35 s, after the load (20 s)"),
        ('url: "http://127.0.0.1:8080"', 'url: "127.0.0.1:8080"', "d.yaml:2: target url must start with http://"),
        ("rate: 4, ", "", "d.yaml:3: load needs rate (requests/s), concurrency or a profile"),
    ],
)
def test_bad_drill_files_fail_in_one_line_naming_file_line_and_field(old: str, new: str, expected: str) -> None:
    text = ISSUE_EXAMPLE.replace(old, new)
    with pytest.raises(ConfigError) as info:
        parse_drill(text, source="d.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_missing_section_and_bad_yaml() -> None:
    with pytest.raises(ConfigError, match=r"^d.yaml:1: missing 'fault'"):
        parse_drill("name: x\ntarget: {url: 'http://h:1'}\nload: {rate: 1, duration_s: 5}\n", source="d.yaml")
    with pytest.raises(ConfigError, match=r"^d.yaml:\d+: not valid YAML"):
        parse_drill("name: [x\n", source="d.yaml")


def test_load_drill_resolves_a_profile_next_to_the_file(tmp_path: Path) -> None:
    f = tmp_path / "drill.yaml"
    f.write_text(ISSUE_EXAMPLE.replace("rate: 4, ", "profile: p.yaml, "), encoding="utf-8")
    assert load_drill(f).load.profile == str(tmp_path / "p.yaml")


def test_rules_file_and_rule_errors() -> None:
    rules = parse_rules(
        "rules:\n  - name: a\n    latency: {dist: lognormal, median_ms: 100, p95_ms: 300}\n"
        "  - name: b\n    share: 0.2\n    error: {status: 503}\n",
        source="r.yaml",
    )
    assert [r.name for r in rules] == ["a", "b"]
    assert rules[1].error_status == 503
    with pytest.raises(ConfigError, match=r"^r.yaml:3: unknown field 'rules.0.latncy'"):
        parse_rules("rules:\n  - name: a\n    latncy: {ms: 1}\n", source="r.yaml")
    with pytest.raises(ConfigError, match="a uniform latency needs min_ms and max_ms"):
        rule_from_dict({"latency": {"dist": "uniform", "min_ms": 3}})
    with pytest.raises(ConfigError, match=r"^rule: error\.status must be ≥ 400 \(got 200\)"):
        rule_from_dict({"error": {"status": 200}})


def test_flags_make_one_rule_each_and_name_the_flag_on_error() -> None:
    rules = rules_from_flags(latency="uniform:100-300", error="503:0.1", reset="0.05:200", stall="2000")
    assert [r.name for r in rules] == ["latency", "error", "reset", "stall"]
    assert rules[1].share == 0.1
    assert rules[1].error_status == 503
    assert rules[2].reset_after_bytes == 200
    assert rules[3].stall_ms == 2000
    for kwargs, flag in [
        ({"latency": "fast"}, "--latency"),
        ({"error": "200"}, "--error"),
        ({"reset": "2"}, "--reset"),
        ({"stall": "x"}, "--stall"),
    ]:
        with pytest.raises(ConfigError, match=f"^{flag}"):
            rules_from_flags(**kwargs)  # type: ignore[arg-type]


def test_latency_distributions_have_the_asked_centre() -> None:
    rng = random.Random(1)
    assert parse_latency("200").sample_s(rng) == 0.2
    uni = [parse_latency("uniform:100-300").sample_s(rng) for _ in range(2000)]
    assert min(uni) >= 0.1
    assert max(uni) <= 0.3
    assert abs(sum(uni) / len(uni) - 0.2) < 0.01
    logn = sorted(Latency("lognormal", median_ms=100, p95_ms=300).sample_s(rng) for _ in range(4000))
    assert abs(logn[2000] - 0.1) < 0.01
    assert abs(logn[3800] - 0.3) < 0.05


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[3] / "examples" / "drills").glob("*.yaml")))
def test_shipped_example_drills_are_valid(path: Path) -> None:
    spec = load_drill(path)
    assert spec.fault.end_s <= spec.load.duration_s
