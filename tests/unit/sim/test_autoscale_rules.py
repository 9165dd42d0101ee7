"""Compound autoscaling rules with their own windows, and scale from zero (article 003 §4.2: "P99 > 1.0 s for 2 min →
scale up; GPU utilisation < 30 % and P99 < 0.8 s for 5 min → scale down"; the method's 4-minute weight load)."""

from __future__ import annotations

import pytest

from tailscope.engine.autoscaler import AutoscalePolicy, Autoscaler, ScaleRule, parse_conditions
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.errors import ConfigError
from tailscope.io.autoscaler import parse_policy
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

METHOD = """
min_replicas: 1
max_replicas: 6
scrape_interval_s: 15
scale_up_cooldown_s: 0
scale_down_cooldown_s: 0
cold_start_s: 240
window_s: 60
rules:
  - {up: "ttft_p99 > 1000", for_s: 120}
  - {down: "gpu_util < 0.3 and ttft_p99 < 800", for_s: 300}
"""


def test_the_methods_rules_parse() -> None:
    p = parse_policy(METHOD, source="p.yaml")
    assert [str(r) for r in p.rules] == [
        "up when ttft_p99 > 1000 for 120 s",
        "down when gpu_util < 0.3 and ttft_p99 < 800 for 300 s",
    ]
    assert p.cold_start_s(16e9) == 240.0  # the 4-minute weight load, whatever the formula says
    with pytest.raises(ConfigError, match=r"p\.yaml:3: rules\[0\]: give exactly one of up:, down: or rebuild:"):
        parse_policy("max_replicas: 2\nrules:\n  - {for_s: 10}\n", source="p.yaml")
    with pytest.raises(ConfigError, match="metric 'gpu_temp' must be one of"):
        parse_policy("rules:\n  - {up: 'gpu_temp > 80'}\n", source="p.yaml")
    with pytest.raises(ConfigError, match="expected METRIC > NUMBER"):
        parse_conditions("ttft_p99 >= 1000")


def test_rules_wait_for_their_own_windows() -> None:
    policy = parse_policy(METHOD, source="p.yaml")
    a = Autoscaler(policy)
    slow = {"ttft_p99": 1500.0, "gpu_util": 0.9}
    # P99 over 1 s from t = 0: nothing until it has held 2 minutes, then +1
    assert [a.decide(t, 1, 0, 0.0, observations=slow) for t in range(0, 120, 15)] == [0] * 8
    assert a.decide(120, 1, 0, 0.0, observations=slow) == 1
    assert "up when ttft_p99 > 1000" in a.reason
    # the window starts again after a step: the next +1 needs another 2 minutes
    assert a.decide(135, 2, 0, 0.0, observations=slow) == 0
    assert a.decide(240, 2, 0, 0.0, observations=slow) == 0  # held since 135 s: 105 s
    assert a.decide(255, 2, 0, 0.0, observations=slow) == 1
    # a dip resets the window
    b = Autoscaler(policy)
    assert b.decide(0, 1, 0, 0.0, observations=slow) == 0
    assert b.decide(60, 1, 0, 0.0, observations={"ttft_p99": 900.0}) == 0
    assert b.decide(150, 1, 0, 0.0, observations=slow) == 0  # 90 s since it came back
    # down: both conditions for 5 minutes; GPU busy keeps the replicas even with a fast P99
    idle = {"ttft_p99": 300.0, "gpu_util": 0.1}
    c = Autoscaler(policy)
    assert all(c.decide(t, 3, 0, 0.0, observations=idle) == 0 for t in range(0, 300, 15))
    assert c.decide(300, 3, 0, 0.0, observations=idle) == -1
    busy = {"ttft_p99": 300.0, "gpu_util": 0.6}
    d = Autoscaler(policy)
    assert all(d.decide(t, 3, 0, 0.0, observations=busy) == 0 for t in range(0, 900, 15))


def test_scale_from_zero_pays_the_four_minute_weight_load() -> None:
    policy = AutoscalePolicy(
        min_replicas=0,
        max_replicas=2,
        scrape_interval_s=15,
        scale_up_cooldown_s=0,
        scale_down_cooldown_s=0,
        cold_start=240.0,
        rules=(
            ScaleRule("up", parse_conditions("ttft_p99 > 1000"), 120),
            ScaleRule("down", parse_conditions("gpu_util < 0.3 and ttft_p99 < 800"), 300),
        ),
    )
    cluster = ClusterSpec(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), model_id="llama-3.1-8b",
                          replicas=0, autoscale=policy)  # fmt: skip
    specs = (RequestSpec(i, 400, 50, at_ns=int(i * 0.5e9), seed=i) for i in range(120))  # 2 req/s for 60 s
    sim = Simulation(cluster, specs)
    recs = list(sim.run())
    assert len(recs) == 120
    assert all(r.ok for r in recs)
    first = sim.result.scale_events[0]
    assert first[0] == 0.0
    assert first[1] == 1
    assert "scale from zero" in first[2]
    by_id = {r.id: r for r in recs}
    ttft0 = ((by_id[0].first_token_ns or 0) - by_id[0].scheduled_ns) / 1e9
    assert 240.0 <= ttft0 < 250.0  # the first request waits for the weights to load
    late = by_id[119]
    assert ((late.first_token_ns or 0) - late.scheduled_ns) / 1e9 > 180.0  # all of them arrived before it served
    with pytest.raises(ConfigError, match="min_replicas 0"):
        AutoscalePolicy(metric="ttft_p99", min_replicas=0).validate()
    with pytest.raises(ConfigError, match="--replicas must be ≥ 1"):
        ClusterSpec(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), replicas=0).validate()


FRAGMENTS = """
min_replicas: 1
max_replicas: 2
scrape_interval_s: 5
cold_start_s: 20
fragmentation: {max_share: 0.6, tau_s: 10}
rules:
  - {rebuild: "kv_fragmentation > 0.4", for_s: 10}
"""


def _fragmenting_run(policy: AutoscalePolicy) -> tuple[Simulation, list[object]]:
    cluster = ClusterSpec(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), model_id="llama-3.1-8b",
                          replicas=1, autoscale=policy)  # fmt: skip
    specs = (RequestSpec(i, 2000, 200, at_ns=int(i * 0.25e9), seed=i) for i in range(1200))  # 4 req/s for 300 s
    sim = Simulation(cluster, specs)
    return sim, list(sim.run())


def test_a_fragmented_replica_is_rebuilt_not_scaled() -> None:
    """The method's third rule: KV fragmentation > 40 % rebuilds the replica (a fresh one cold-starts beside it,
    then the old one drains) instead of adding capacity; fragmentation falls back to 0 on the new replica."""
    policy = parse_policy(FRAGMENTS, source="p.yaml")
    assert policy.fragmentation is not None
    assert str(policy.rules[0]) == "rebuild when kv_fragmentation > 0.4 for 10 s"
    sim, recs = _fragmenting_run(policy)
    assert len(recs) == 1200
    assert all(r.ok for r in recs)  # type: ignore[attr-defined]
    res = sim.result
    assert res.rebuilds >= 1
    rebuild = next(e for e in res.scale_events if e[2].startswith("rebuild replica"))
    assert rebuild[1] == 0  # a replacement, not a scale step
    assert "kv_fragmentation" in rebuild[2]
    frag = [row["kv_fragmentation"] for row in res.timeline]
    peak = frag.index(max(frag))
    assert max(frag) > 0.4
    assert min(frag[peak:]) < 0.2  # the rebuilt replica starts clean
    assert max(row["replicas_ready"] for row in res.timeline) <= 2  # one surge replica at most, briefly


def test_fragmentation_without_a_rebuild_keeps_the_capacity_lost() -> None:
    policy = parse_policy(FRAGMENTS.replace('  - {rebuild: "kv_fragmentation > 0.4", for_s: 10}\n', "").replace(
        "rules:\n", ""), source="p.yaml")  # fmt: skip
    sim, recs = _fragmenting_run(policy)
    assert all(r.ok for r in recs)  # type: ignore[attr-defined]
    assert sim.result.rebuilds == 0
    assert sim.result.timeline[-1]["kv_fragmentation"] > 0.5  # toward max_share, for good


def test_fragmentation_rules_are_checked() -> None:
    with pytest.raises(ConfigError, match="fragments only with a fragmentation: model"):
        parse_policy("rules:\n  - {rebuild: 'kv_fragmentation > 0.4'}\n", source="p.yaml")
    with pytest.raises(ConfigError, match=r"p\.yaml:1: fragmentation\.max_share"):
        parse_policy("fragmentation: {max_share: 0.95}\n", source="p.yaml")
    with pytest.raises(ConfigError, match="give exactly one of up:, down: or rebuild:"):
        parse_policy("rules:\n  - {up: 'ttft_p99 > 1', rebuild: 'ttft_p99 > 1'}\n", source="p.yaml")
    a = Autoscaler(parse_policy(FRAGMENTS, source="p.yaml"))
    hot = {"kv_fragmentation": 0.5}
    assert a.decide(0, 1, 0, 0.0, observations=hot) == 0
    assert a.rebuild is None  # not yet held 10 s
    assert a.decide(10, 1, 0, 0.0, observations=hot) == 0
    assert a.rebuild is not None
    assert a.decide(30, 1, 1, 0.0, observations=hot, rebuilding=1) == 0
    assert a.rebuild is None  # one rebuild at a time


def test_the_planning_docs_policy_parses() -> None:
    """docs/planning.md § 8 shows the method's three rules as one policy file: it must load as written."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "planning.md").read_text(encoding="utf-8")
    block = text.split("## 8. Autoscaling on custom metrics", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    policy = parse_policy(block, source="docs/planning.md")
    assert [r.action for r in policy.rules] == ["up", "down", "rebuild"]
    assert policy.min_replicas == 0
    assert policy.cold_start == 240.0
