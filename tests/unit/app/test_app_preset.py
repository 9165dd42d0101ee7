"""Reference-application presets: the shipped one loads, bad files fail with file:line, fixes and incidents apply."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tailscope.app.presets import PRESETS_DIR, preset_names, resolve_preset
from tailscope.errors import ConfigError
from tailscope.io.app_preset import load_app_preset, parse_app_preset
from tailscope.workload.app_preset import FIXES, INCIDENTS, Dist, apply_fixes, apply_incidents

MINIMAL = """\
name: tiny
retrieval:
  searches:
    - {name: faq, base: {median_ms: 10, p95_ms: 20}, per_doc: {median_ms: 1, p95_ms: 2}}
"""


def test_shipped_preset_is_the_case_study_starting_point() -> None:
    assert "knowledge-assistant" in preset_names()
    p = resolve_preset("knowledge-assistant")
    assert [s.name for s in p.searches] == ["faq", "products", "tickets"]
    assert (p.auth_async, p.parallel_search, p.top_k, p.semantic_cache) == (False, False, 100, False)
    assert (p.routing, p.prompt_cache, p.keep_alive) == (False, False, False)
    assert p.mean_steps == pytest.approx(2.3, abs=0.1)  # "ReAct 循环平均 2.3 步"


def test_a_preset_by_path_and_a_minimal_file(tmp_path: Path) -> None:
    f = tmp_path / "tiny.yaml"
    f.write_text(MINIMAL)
    p = resolve_preset(f)
    assert p.name == "tiny"
    assert p.searches[0].base == Dist(0.01, 0.02)
    assert resolve_preset(str(PRESETS_DIR / "knowledge-assistant.yaml")).name == "knowledge-assistant"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (MINIMAL + "answer_tokens: 0\n", "p.yaml:5: answer_tokens must be ≥ 1"),
        (MINIMAL + "gateway:\n  auth: {median_ms: 1, p95_ms: 2}\n", "p.yaml:6: unknown field 'gateway.auth'"),
        (MINIMAL + "agent:\n  steps: {1: 0.5, 2: 0.2}\n", "p.yaml:6: agent.steps maps step counts"),
        (MINIMAL + "network:\n  connect: {median_ms: 50, p95_ms: 10}\n", "p.yaml:6: network.connect.p95_ms must be ≥"),
        ("name: x\n", "p.yaml:1: missing 'retrieval'"),
        ("name: [\n", "p.yaml:2: not valid YAML"),
        ("- 1\n", "p.yaml:1: an app preset is a mapping"),
    ],
)
def test_bad_preset_files_name_file_line_and_field(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_app_preset(f)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_unknown_preset_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="no such preset; use one of knowledge-assistant"):
        resolve_preset("nope")


def test_each_fix_flips_its_switch() -> None:
    base = parse_app_preset(MINIMAL)
    assert apply_fixes(base, "async-auth").auth_async
    assert apply_fixes(base, "parallel-retrieval").parallel_search
    assert apply_fixes(base, "rerank-top30").top_k == 30
    assert apply_fixes(base, "semantic-cache").semantic_cache
    assert apply_fixes(base, "small-model-routing").routing
    assert apply_fixes(base, "max-iterations=3").max_iterations == 3
    assert apply_fixes(base, ["max-iterations=5"]).max_iterations == 5
    assert apply_fixes(base, "prompt-cache").prompt_cache
    assert apply_fixes(base, "keep-alive").keep_alive
    everything = apply_fixes(base, "all")
    assert (everything.auth_async, everything.parallel_search, everything.top_k, everything.keep_alive) == (
        True, True, 30, True,
    )  # fmt: skip
    assert set(FIXES) >= {"async-auth", "keep-alive", "max-iterations=3"}
    assert apply_fixes(base, "") == base


@pytest.mark.parametrize(("spec", "needle"), [("bogus", "unknown; use all or any of async-auth"),
                                              ("max-iterations=0", "whole number ≥ 1")])  # fmt: skip
def test_bad_fixes_say_what_to_use(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        apply_fixes(parse_app_preset(MINIMAL), spec)


def test_incidents_break_what_they_say_after_the_fixes() -> None:
    fixed = apply_fixes(parse_app_preset(MINIMAL), "all")
    broken = apply_incidents(fixed, "all")
    assert (broken.pool_size, broken.hold_connection) == (2, True)
    assert (broken.audit_sync, broken.use_slow_dns, broken.sse_buffering) == (True, True, True)
    assert not broken.keep_alive  # no-reuse undoes the keep-alive fix
    assert set(INCIDENTS) == {"pool-exhaustion", "sync-audit", "slow-dns", "no-reuse", "sse-buffering"}
    with pytest.raises(ConfigError, match="--incident 'nope'"):
        apply_incidents(fixed, "nope")


def test_lognormal_cost_has_its_median_and_p95() -> None:
    d = Dist(1.0, 2.0)
    rng = random.Random(1)
    draws = sorted(d.sample(rng) for _ in range(20_000))
    assert draws[10_000] == pytest.approx(1.0, rel=0.05)
    assert draws[19_000] == pytest.approx(2.0, rel=0.07)
    assert Dist(0.0, 0.0).sample(rng) == 0.0


def test_agent_tool_calls_per_step_serial_or_parallel(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(MINIMAL + "agent:\n  tools_per_step: 3\n  parallel_tools: true\n")
    p = load_app_preset(f)
    assert (p.tools_per_step, p.parallel_tools) == (3, True)
