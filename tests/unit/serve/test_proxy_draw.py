"""How the proxy's rules combine on one request: shares drawn per rule, paths matched by prefix, latencies added,
the first error status kept, the smallest reset point and bandwidth cap, a black hole from any rule."""

from __future__ import annotations

import random

import pytest

from tailscope.errors import ConfigError
from tailscope.io.proxy_rules import Latency, ProxyRule
from tailscope.serve.proxy import FaultProxy, draw


def test_effects_add_up_across_matching_rules() -> None:
    rules = [
        ProxyRule("a", latency=Latency("fixed", ms=100), reset_after_bytes=500, bandwidth_kbps=64),
        ProxyRule("b", latency=Latency("fixed", ms=50), latency_down=Latency("fixed", ms=20), error_status=503),
        ProxyRule("c", error_status=429, reset_after_bytes=200, bandwidth_kbps=8, path="/v1/chat"),
        ProxyRule("d", blackhole=True, path="/admin"),
    ]
    fx = draw(rules, "/v1/chat/completions", random.Random(0))
    assert fx.rules == ["a", "b", "c"]
    assert fx.delay_up_s == pytest.approx(0.15)
    assert fx.delay_down_s == pytest.approx(0.02)
    assert fx.error_status == 503
    assert fx.reset_after == 200
    assert fx.bytes_per_s == 8000
    assert not fx.blackhole
    assert draw(rules, "/admin/x", random.Random(0)).blackhole


def test_a_share_applies_to_about_that_share_of_requests() -> None:
    rng = random.Random(7)
    rules = [ProxyRule("flaky", share=0.25, error_status=503)]
    hits = sum(draw(rules, "/", rng).error_status is not None for _ in range(4000))
    assert 900 <= hits <= 1100
    assert draw([ProxyRule("never", share=0.0, blackhole=True)], "/", rng).rules == []


def test_rules_by_name_and_modes() -> None:
    proxy = FaultProxy("http://127.0.0.1:1", rules=[ProxyRule("a"), ProxyRule("b")])
    proxy.add_rules([ProxyRule("a", share=0.5)])
    assert [(r.name, r.share) for r in proxy.rules] == [("b", 1.0), ("a", 0.5)]
    assert proxy.remove_rule("b")
    assert not proxy.remove_rule("b")
    with pytest.raises(ConfigError, match="need --mode http"):
        FaultProxy("127.0.0.1:5432", mode="tcp", rules=[ProxyRule("e", error_status=503)])
    with pytest.raises(ConfigError, match="--mode 'udp'"):
        FaultProxy("http://127.0.0.1:1", mode="udp")
    with pytest.raises(ConfigError, match="an http proxy forwards to an http:// or https:// URL"):
        FaultProxy("127.0.0.1:5432")
