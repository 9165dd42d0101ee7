"""Preflight against the target: a workload that cannot fit the served context, or an unreachable mixed-traffic
target, fails with one line before any load is sent — and nothing is stored."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tailscope
from tailscope.store.runs import RunStore

pytestmark = pytest.mark.integration


def test_prompts_longer_than_the_served_context_fail_before_any_load(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    with pytest.raises(tailscope.ConfigError, match=r"serves a context of 131,072"):
        tailscope.bench(requests=3, input_tokens=200_000, store=db)
    assert RunStore(db).list_runs() == []  # refused before the run existed


def test_an_unreachable_mixed_traffic_target_fails_before_any_load(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        textwrap.dedent(
            """
            name: with-api
            classes: [{name: a, input_tokens: 32, output_tokens: 4}]
            arrival: {mode: open, stages: [{rate: 4, duration_s: 1}]}
            mixed_traffic: [{name: api, url: "http://127.0.0.1:9/health", rate: 2}]
            """
        )
    )
    with pytest.raises(
        tailscope.ConfigError, match=r"mixed_traffic 'api': cannot connect to http://127.0.0.1:9/health"
    ):
        tailscope.bench(profile=profile)


def test_an_unset_api_key_variable_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: --api-key-env naming a variable that is not set used to send no key without a word."""
    monkeypatch.delenv("TAILSCOPE_TEST_NO_SUCH_KEY", raising=False)
    res = tailscope.bench(requests=2, input_tokens=16, output_tokens=2, api_key_env="TAILSCOPE_TEST_NO_SUCH_KEY")
    said = [w for w in res.summary.warnings if "TAILSCOPE_TEST_NO_SUCH_KEY" in w]
    assert said == [
        "--api-key-env TAILSCOPE_TEST_NO_SUCH_KEY: that variable is not set (or empty); requests carry no API key"
    ]
    monkeypatch.setenv("TAILSCOPE_TEST_NO_SUCH_KEY", "k")
    res = tailscope.bench(requests=2, input_tokens=16, output_tokens=2, api_key_env="TAILSCOPE_TEST_NO_SUCH_KEY")
    assert not [w for w in res.summary.warnings if "api-key-env" in w]
    res = tailscope.bench(requests=2, input_tokens=16, output_tokens=2)  # the default variable: unset is normal
    assert not [w for w in res.summary.warnings if "api-key-env" in w]
