"""Router policies and the autoscaling rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.engine.autoscaler import AutoscalePolicy, Autoscaler
from tailscope.engine.router import Router
from tailscope.errors import ConfigError
from tailscope.io.autoscaler import load_policy


def test_round_robin_cycles_over_ready() -> None:
    r = Router("round_robin")
    assert [r.choose([0, 2], [0, 0, 0]) for _ in range(4)] == [0, 2, 0, 2]


def test_least_outstanding_picks_the_idlest() -> None:
    r = Router("least_outstanding")
    assert r.choose([0, 1, 2], [5, 1, 1]) == 1


def test_prefix_affinity_is_sticky_and_falls_back_when_overloaded() -> None:
    r = Router("prefix_affinity")
    homes = {r.choose([0, 1, 2, 3], [0, 0, 0, 0], key) for key in range(40)}
    assert len(homes) > 1  # keys spread over replicas
    key = 12345
    home = r.choose([0, 1, 2, 3], [0, 0, 0, 0], key)
    assert all(r.choose([0, 1, 2, 3], [1, 1, 1, 1], key) == home for _ in range(5))
    load = [0, 0, 0, 0]
    load[home] = 50
    assert r.choose([0, 1, 2, 3], load, key) != home
    assert r.choose([0, 1], [3, 1], None) == 1  # no key → least outstanding
    with pytest.raises(ConfigError):
        Router("random")


def test_cold_start_is_provisioning_plus_load_plus_init() -> None:
    p = AutoscalePolicy(provisioning_s=60, load_gbps=2.0, engine_init_s=20)
    assert p.cold_start_s(16e9) == pytest.approx(60 + 8 + 20)


def test_hpa_rule_with_cooldowns_and_bounds() -> None:
    a = Autoscaler(
        AutoscalePolicy(
            metric="queue_depth",
            target=4,
            min_replicas=1,
            max_replicas=5,
            scale_up_cooldown_s=60,
            scale_down_cooldown_s=300,
        )
    )
    assert a.decide(0, ready=1, pending=0, observed=12) == 2  # ceil(1 × 12 / 4) = 3 replicas
    assert a.decide(30, ready=1, pending=2, observed=40) == 0  # scale-up cooldown
    assert a.decide(61, ready=3, pending=0, observed=40) == 2  # capped at max_replicas = 5
    assert a.decide(100, ready=5, pending=0, observed=0) == 0  # scale-down cooldown after the last change
    assert a.decide(400, ready=5, pending=0, observed=0) == -4  # down to min_replicas


def test_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("metric: ttft_p99\ntarget: 2000\nmax_replicas: 4\n", encoding="utf-8")
    p = load_policy(f)
    assert p.metric == "ttft_p99"
    assert p.max_replicas == 4
    f.write_text("metric: gpu_temp\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="metric"):
        load_policy(f)
    f.write_text("metrik: running\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="metrik"):
        load_policy(f)
