"""``tailscope sim`` wiring without the store: flags and profiles become the right request stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.errors import ConfigError, PlanError
from tailscope.sim.run import SimArgs, build_cluster, run_sim

PROFILE = """\
name: chat
classes:
  - name: conversation
    weight: 1
    session: {turns: {dist: fixed, value: 3}, think_time_s: {dist: fixed, value: 1}}
    input_tokens: {dist: fixed, value: 100}
    output_tokens: {dist: fixed, value: 40}
shared_prefix: {tokens: 320, variants: 2, share: 1.0}
arrival: {mode: open, process: poisson, stages: [{rate: 4, duration_s: 10}]}
stop: {duration_s: 10}
"""


def test_flags_closed_loop_run() -> None:
    out = run_sim(SimArgs(concurrency=4, requests=40, input_tokens="200", output_tokens="20", store=False))
    assert out.run.kind == "sim"
    assert out.summary["requests"]["completed"] == 40
    assert out.run.settings["engine"]["max_num_seqs"] == 1024  # vLLM's default on an H100
    assert out.run.settings["load"]["mode"] == "closed"


def test_profile_sessions_and_prefixes(tmp_path: Path) -> None:
    p = tmp_path / "chat.yaml"
    p.write_text(PROFILE, encoding="utf-8")
    out = run_sim(SimArgs(profile=p, seed=1, store=False))
    recs = out.records
    assert recs
    assert {r.turn for r in recs} == {0, 1, 2}
    turn2 = [r for r in recs if r.turn == 2]
    assert all(r.input_tokens == 320 + 100 + 40 + 100 + 40 + 100 for r in turn2)
    assert out.result.prefix_hit_rate is not None
    assert out.result.prefix_hit_rate > 0.5
    # a flag typed on the command line overrides the profile
    faster = run_sim(SimArgs(profile=p, seed=1, rate=8.0, explicit=frozenset({"rate"}), store=False))
    assert len(faster.records) > len(recs)


def test_bad_deployments_fail_before_simulating() -> None:
    with pytest.raises(PlanError):
        build_cluster(SimArgs(model="llama-3.1-70b", gpu="l4"))
    with pytest.raises(ConfigError, match="--weights-dtype"):
        build_cluster(SimArgs(weights_dtype="int3"))
    with pytest.raises(ConfigError, match="max-num-batched-tokens"):
        build_cluster(SimArgs(max_num_seqs=64, max_num_batched_tokens=32))


def test_a_profiles_mixed_traffic_is_never_dropped_silently(tmp_path: Path) -> None:
    p = tmp_path / "mixed.yaml"
    p.write_text(
        PROFILE + 'mixed_traffic:\n  - {name: profile_api, method: GET, url: "http://127.0.0.1:9/x", rate: 5}\n'
    )
    out = run_sim(SimArgs(profile=p, seed=1, store=False))
    assert out.run.settings["load"]["mixed_traffic_not_simulated"] == ["profile_api"]
    assert "mixed_traffic (profile_api) is not simulated" in out.summary["warnings"][0]


def test_sim_warns_when_an_open_loop_over_saturates() -> None:
    """Issue 26 item 4: the over-saturation check bench runs also runs on simulated records (open loop, one rate)."""
    over = run_sim(SimArgs(rate=150, requests=1500, input_tokens="1024", output_tokens="256", store=False))
    assert over.run_summary is not None
    assert any(w.startswith("OVER-SATURATED") for w in over.run_summary.warnings)
    calm = run_sim(SimArgs(rate=2, requests=60, input_tokens="256", output_tokens="32", store=False))
    assert calm.run_summary is not None
    assert not any("SATURATED" in w for w in calm.run_summary.warnings)
    closed = run_sim(SimArgs(concurrency=64, requests=300, input_tokens="1024", output_tokens="64", store=False))
    assert closed.run_summary is not None
    assert not any("SATURATED" in w for w in closed.run_summary.warnings)  # a closed loop regulates itself


def test_sim_refuses_a_capped_open_loop(tmp_path: Path) -> None:
    import pytest

    from tailscope.errors import ConfigError

    p = tmp_path / "p.yaml"
    p.write_text(
        "name: c\nclasses: [{name: a, input_tokens: 8, output_tokens: 4}]\n"
        "arrival: {rate: 5, max_concurrency: 2}\nstop: {requests: 10}\n"
    )
    with pytest.raises(ConfigError, match="max_concurrency"):
        run_sim(SimArgs(profile=p, store=False))
