"""Profile files: the example loads; every mistake names file:line, the field path and what is allowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailscope.errors import ProfileError
from tailscope.io.lengths import read_lengths
from tailscope.io.profile import load_profile, parse_profile
from tailscope.workload.profile import Overrides, apply_overrides

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "support-chat.yaml"

BASE = """\
name: t
classes:
  - name: a
    input_tokens: {dist: fixed, value: 10}
    output_tokens: 5
  - name: b
    weight: 2
    input_tokens: {dist: uniform, min: 1000, max: 3000}
    output_tokens: {dist: fixed, value: 300}
arrival:
  rate: 4
stop: {requests: 50}
"""


def _err(text: str) -> str:
    with pytest.raises(ProfileError) as info:
        parse_profile(text, source="profile.yaml")
    return str(info.value)


def with_mixed_traffic(text: str) -> str:
    """The example with its commented-out mixed traffic switched on."""
    return text.replace("# mixed_traffic:", "mixed_traffic:").replace(
        "#   - {name: profile_api", "  - {name: profile_api"
    )


def test_example_from_the_issue_loads() -> None:
    p = load_profile(EXAMPLE)
    assert p.model is None  # issue 24: `model: tiny` made it fail on the built-in engine without --model
    assert not p.mixed_traffic  # off, so the example runs as is; uncommented it parses:
    p = parse_profile(with_mixed_traffic(EXAMPLE.read_text()), source="p.yaml")
    assert p.name == "support-chat"
    assert [c.name for c in p.classes] == ["short", "long_context", "conversation"]
    assert [c.weight for c in p.classes] == [0.60, 0.15, 0.25]
    short = p.classes[0]
    assert (short.input_tokens.kind, short.input_tokens.a, short.input_tokens.lo, short.input_tokens.hi) == (
        "lognormal",
        40.0,
        5,
        300,
    )
    conv = p.classes[2]
    assert conv.session is not None
    assert conv.session.think_time_s.kind == "exponential"
    assert conv.session.think_time_s.a == 3.0
    assert p.shared_prefix is not None
    assert (p.shared_prefix.tokens, p.shared_prefix.variants, p.shared_prefix.share) == (500, 4, 0.8)
    kinds = [s.kind for s in p.arrival.stages]
    assert kinds == ["rate", "ramp", "rate", "burst"]
    assert p.arrival.stages[3].count == 40
    assert p.arrival.stages[3].at_s == 90.0
    assert p.warmup.requests == 10
    assert p.stop.duration_s == 180.0
    assert {s.key: s.threshold_ms for s in p.slos} == {"ttft_p99": 1500.0, "tpot_p99": 60.0, "e2e_p95": 15000.0}
    assert p.mixed_traffic[0].url == "http://127.0.0.1:9000/profile"
    assert p.mixed_traffic[0].rate == 20


def test_issue_example_min_greater_than_max_names_line_and_field() -> None:
    text = BASE.replace("{dist: uniform, min: 1000, max: 3000}", "{dist: uniform, min: 3000, max: 1000}")
    msg = _err(text)
    assert msg.startswith("profile.yaml:8: classes[1].input_tokens.min must be ≤ max (got 3000 > 1000)")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # unknown key → says which keys are allowed
        (
            "    weight: 2\n",
            "    weight: 2\n    colour: red\n",
            r"^profile\.yaml:8: classes\[1\]\.colour is not a known field "
            r"\(allowed: name, weight, input_tokens, output_tokens, session, extra_body, model, priority, agent, "
            r"dataset\)",
        ),
        # bad type / range
        ("weight: 2", "weight: -2", r"^profile\.yaml:7: classes\[1\]\.weight must be greater than 0 \(got -2\)"),
        # bad literal
        (
            "arrival:\n  rate: 4",
            "arrival:\n  process: bursty\n  rate: 4",
            r"^profile\.yaml:11: arrival\.process must be 'poisson', 'constant' or 'gamma' \(got 'bursty'\)",
        ),
        # missing required parameter of a distribution
        (
            "{dist: fixed, value: 300}",
            "{dist: fixed, mean: 300}",
            r"^profile\.yaml:9: classes\[1\]\.output_tokens\.value is required for dist fixed",
        ),
        # missing required field
        ("    output_tokens: 5\n", "", r"^profile\.yaml:3: classes\[0\]\.output_tokens is required"),
        # contradictory arrival
        (
            "arrival:\n  rate: 4",
            "arrival:\n  mode: closed\n  concurrency: 2\n  rate: 4",
            r"^profile\.yaml:13: arrival\.rate closed mode takes arrival\.concurrency only",
        ),
        # bad SLO value
        (
            "stop: {requests: 50}",
            "stop: {requests: 50}\nslo: {ttft_p99: fast}",
            r"^profile\.yaml:13: slo\.ttft_p99 expected a duration",
        ),
        # duplicate class names
        ("  - name: b\n", "  - name: a\n", r"^profile\.yaml:6: classes\[1\]\.name must be unique \(got 'a' twice\)"),
        # YAML syntax error
        ("stop: {requests: 50}", "stop: {requests: 50", r"^profile\.yaml:\d+: not valid YAML"),
        # a burst needs at_s
        (
            "arrival:\n  rate: 4",
            "arrival:\n  stages:\n    - {rate: 4, duration_s: 10}\n    - {burst: 5}",
            r"^profile\.yaml:13: arrival\.stages\[1\]\.at_s is required for a burst",
        ),
        # a stage with two kinds
        (
            "arrival:\n  rate: 4",
            "arrival:\n  stages:\n    - {rate: 4, ramp_to: 8, duration_s: 10}",
            r"^profile\.yaml:12: arrival\.stages\[0\] must have exactly one of rate, ramp_to or burst",
        ),
        # bad length shorthand string
        (
            "output_tokens: 5",
            "output_tokens: zipf:2",
            r"^profile\.yaml:5: classes\[0\]\.output_tokens unknown length spec",
        ),
        # mixed traffic URL
        (
            "stop: {requests: 50}",
            "stop: {requests: 50}\nmixed_traffic:\n  - {name: x, url: ftp://h/, rate: 1}",
            r"^profile\.yaml:14: mixed_traffic\[0\]\.url must start with http:// or https://",
        ),
    ],
)
def test_mistakes_name_file_line_and_field(old: str, new: str, expected: str) -> None:
    assert old in BASE
    msg = _err(BASE.replace(old, new, 1))
    assert re.search(expected, msg), msg


def test_several_mistakes_reports_the_first_and_counts_the_rest() -> None:
    text = BASE.replace("weight: 2", "weight: -2").replace("rate: 4", "rate: -4")
    msg = _err(text)
    assert "(and 1 more problem; fix this one first)" in msg


def test_top_level_must_be_a_mapping() -> None:
    assert _err("- a\n- b\n").startswith("profile.yaml:1: a profile is a YAML mapping")


def test_length_shorthands() -> None:
    text = BASE.replace("output_tokens: 5", "output_tokens: 'lognormal:100:0.5:min=10:max=400'")
    p = parse_profile(text)
    d = p.classes[0].output_tokens
    assert (d.kind, d.a, d.b, d.lo, d.hi) == ("lognormal", 100.0, 0.5, 10, 400)


def test_think_time_shorthand_accepts_units() -> None:
    text = BASE.replace("    weight: 2\n", "    weight: 2\n    session: {turns: 3, think_time_s: '500ms'}\n")
    p = parse_profile(text)
    s = p.classes[1].session
    assert s is not None
    assert s.think_time_s.kind == "fixed"
    assert s.think_time_s.a == pytest.approx(0.5)
    assert s.turns.a == 3


def test_empirical_csv_and_jsonl_relative_to_profile(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lens.csv").write_text("prompt,completion\n10,3\n20,4\n30,5\n")
    (tmp_path / "data" / "lens.jsonl").write_text('{"n": 7}\n{"n": 9}\n')
    text = BASE.replace(
        "{dist: fixed, value: 10}", "{dist: empirical, file: data/lens.csv, column: prompt, max: 25}"
    ).replace("output_tokens: 5", "output_tokens: {dist: empirical, file: data/lens.jsonl, column: n}")
    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    p = load_profile(prof)
    assert p.classes[0].input_tokens.values == (10, 20, 30)
    assert p.classes[0].input_tokens.hi == 25
    assert p.classes[0].output_tokens.values == (7, 9)


def test_empirical_missing_file_and_bad_row(tmp_path: Path) -> None:
    text = BASE.replace("{dist: fixed, value: 10}", "{dist: empirical, file: nope.csv}")
    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    with pytest.raises(ProfileError, match=r"p\.yaml:4: classes\[0\]\.input_tokens\.file no such file 'nope\.csv'"):
        load_profile(prof)
    (tmp_path / "bad.csv").write_text("10\n20\nlots\n")
    with pytest.raises(ProfileError, match=r"bad\.csv:3: a length must be a number \(got 'lots'\)"):
        read_lengths(tmp_path / "bad.csv")


def test_overrides_cli_beats_file() -> None:
    p = load_profile(EXAMPLE)
    q = apply_overrides(p, Overrides(rate=3.0, duration_s=20.0, warmup=0, model="other"))
    assert q.arrival.mode == "open"
    assert [(s.kind, s.rate) for s in q.arrival.stages] == [("rate", 3.0)]
    assert q.stop.duration_s == 20.0
    assert q.warmup.requests == 0
    assert q.model == "other"
    c = apply_overrides(p, Overrides(concurrency=8))
    assert c.arrival.mode == "closed"
    assert c.arrival.concurrency == 8
    assert c.arrival.stages == ()
    assert apply_overrides(p, None) is p


def test_docs_example_block_loads_and_matches_the_example_file() -> None:
    doc = (ROOT / "docs" / "workload.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    from_doc = parse_profile(block, source="docs/workload.md")
    from_file = load_profile(EXAMPLE)
    assert from_doc.classes == from_file.classes
    assert from_doc.arrival == from_file.arrival


def test_open_loop_cap_max_concurrency() -> None:
    p = parse_profile(BASE.replace("  rate: 4", "  rate: 4\n  max_concurrency: 3"), source="profile.yaml")
    assert p.arrival.mode == "open"
    assert p.arrival.max_concurrency == 3
    msg = _err(BASE.replace("arrival:\n  rate: 4", "arrival:\n  mode: closed\n  concurrency: 2\n  max_concurrency: 3"))
    assert re.search(r"^profile\.yaml:\d+: arrival\.max_concurrency closed mode takes arrival\.concurrency only", msg)
    # --rate with --concurrency over a profile: its open loop, capped
    capped = apply_overrides(p, Overrides(rate=2.0, concurrency=5))
    assert capped.arrival.mode == "open"
    assert capped.arrival.max_concurrency == 5
    closed = apply_overrides(parse_profile(BASE, source="p"), Overrides(concurrency=5))
    assert closed.arrival.mode == "closed"
    assert closed.arrival.max_concurrency is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "  rate: 4",
            "  rate: 4000000",
            r"^profile\.yaml:11: arrival\.rate is above the largest accepted value 1,000,000",
        ),
        ("  rate: 4", "  rate: .nan", r"^profile\.yaml:11: arrival\.rate must be a finite number"),
        (
            "  rate: 4",
            "  stages: [{rate: 2, duration_s: 1.0e+9}]",
            r"arrival\.stages\[0\]\.duration_s is above .* 604,800",
        ),
        ("  rate: 4", "  stages: [{burst: 1000000000000, at_s: 1}]", r"arrival\.stages\[0\]\.burst is above"),
        ("  rate: 4", "  mode: closed\n  concurrency: 1000000", r"arrival\.concurrency is above .* 100,000"),
        ("stop: {requests: 50}", "stop: {requests: 1000000000000}", r"^profile\.yaml:12: stop\.requests is above"),
        ("stop: {requests: 50}", "stop: {duration_s: 1.0e+9}", r"stop\.duration_s is above"),
        (
            "stop: {requests: 50}",
            "stop: {requests: 50}\nwarmup: {requests: 1000000000000}",
            r"warmup\.requests is above",
        ),
        (
            "output_tokens: 5",
            "output_tokens: 100000000",
            r"^profile\.yaml:5: classes\[0\]\.output_tokens\.value 100,000,000 tokens is above the largest accepted "
            r"value 10,000,000",
        ),
        (
            "{dist: uniform, min: 1000, max: 3000}",
            "{dist: uniform, min: 1000, max: 30000000}",
            r"^profile\.yaml:8: classes\[1\]\.input_tokens\.max 30,000,000 tokens is above",
        ),
        (
            "output_tokens: 5",
            "output_tokens: {dist: lognormal, median: 100, sigma: 50}",
            r"output_tokens\.sigma 50 is above",
        ),
        (
            "output_tokens: 5",
            "output_tokens: 5\n    session: {turns: 1000000}",
            r"classes\[0\]\.session\.turns\.value 1,000,000 turns is above .* 10,000",
        ),
        (
            "output_tokens: 5",
            "output_tokens: 5\n    session: {turns: 3, think_time_s: 1.0e+9}",
            r"session\.think_time_s\.value 1,000,000,000 s is above .* 604,800",
        ),
        (
            "stop: {requests: 50}",
            "stop: {requests: 50}\nshared_prefix: {tokens: 100000000}",
            r"shared_prefix\.tokens is above .* 10,000,000",
        ),
        (
            "stop: {requests: 50}",
            "stop: {requests: 50}\nmixed_traffic:\n  - {name: x, url: http://h/, rate: 1.0e+9}",
            r"mixed_traffic\[0\]\.rate is above",
        ),
        ("weight: 2", "weight: 1.0e+12", r"classes\[1\]\.weight is above"),
    ],
)
def test_every_profile_number_is_bounded(old: str, new: str, expected: str) -> None:
    """Issue 26 item 2: bounds on every profile field, the same as the flags', one line naming file:line and field."""
    assert old in BASE
    msg = _err(BASE.replace(old, new, 1))
    assert re.search(expected, msg), msg
    assert "\n" not in msg
