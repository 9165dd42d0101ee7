"""Seeded fault decisions: deterministic per (seed, sequence number), rates as configured."""

from __future__ import annotations

import pytest

from tailscope.errors import ConfigError
from tailscope.serve.faults import NO_FAULTS, FaultConfig, FaultInjector


def test_no_faults_by_default() -> None:
    inj = FaultInjector(FaultConfig())
    assert all(inj.plan(i, 100) is NO_FAULTS for i in range(100))


def test_same_seed_same_plans_in_any_order() -> None:
    cfg = FaultConfig(
        fail_rate=0.1, rate_limit_rate=0.1, stall_prob=0.2, disconnect_prob=0.2, malformed_rate=0.2, seed=7
    )
    a = FaultInjector(cfg)
    b = FaultInjector(cfg)
    forward = [a.plan(i, 50) for i in range(200)]
    backward = [b.plan(i, 50) for i in reversed(range(200))][::-1]
    assert forward == backward
    other = FaultInjector(
        FaultConfig(fail_rate=0.1, rate_limit_rate=0.1, stall_prob=0.2, disconnect_prob=0.2, malformed_rate=0.2, seed=8)
    )
    assert [other.plan(i, 50) for i in range(200)] != forward


def test_rates_and_positions() -> None:
    cfg = FaultConfig(
        fail_rate=0.2,
        rate_limit_rate=0.1,
        stall_prob=0.5,
        stall_ms=300,
        disconnect_prob=0.25,
        malformed_rate=0.3,
        seed=1,
    )
    inj = FaultInjector(cfg)
    plans = [inj.plan(i, 20) for i in range(4000)]
    n = len(plans)
    assert abs(sum(p.status == 500 for p in plans) / n - 0.2) < 0.03
    assert abs(sum(p.status == 429 for p in plans) / n - 0.1) < 0.03
    served = [p for p in plans if p.status is None]
    assert abs(sum(p.stall_after is not None for p in served) / len(served) - 0.5) < 0.04
    assert abs(sum(p.disconnect_after is not None for p in served) / len(served) - 0.25) < 0.04
    assert abs(sum(p.malformed_after is not None for p in served) / len(served) - 0.3) < 0.04
    for p in served:
        for pos in (p.stall_after, p.disconnect_after, p.malformed_after):
            assert pos is None or 1 <= pos <= 19
        if p.stall_after is not None:
            assert p.stall_s == pytest.approx(0.3)


def test_single_token_responses_are_never_cut() -> None:
    inj = FaultInjector(FaultConfig(disconnect_prob=1.0))
    assert all(inj.plan(i, 1).disconnect_after is None for i in range(50))
    assert all(inj.plan(i, 2).disconnect_after == 1 for i in range(50))


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"fail_rate": 1.5}, "--fail-rate"),
        ({"stall_prob": -0.1}, "--stall-prob"),
        ({"fail_rate": 0.6, "rate_limit_rate": 0.6}, "--rate-limit-rate"),
        ({"stall_ms": -1}, "--stall-ms"),
        ({"malformed_rate": 2}, "--malformed-rate"),
    ],
)
def test_invalid_settings_name_the_flag(kwargs: dict[str, float], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        FaultInjector(FaultConfig(**kwargs))  # type: ignore[arg-type]


def test_loopback_detection() -> None:
    from tailscope.serve.server import is_loopback

    assert is_loopback("127.0.0.1")
    assert is_loopback("localhost")
    assert is_loopback("::1")
    assert is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.168.1.5")
    assert not is_loopback("example.com")
