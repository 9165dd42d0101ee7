"""Cacheability: the method's three-part score, its examples, and the API on a file with known reuse."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import tailscope
from tailscope.errors import ConfigError
from tailscope.records import Span
from tailscope.trace.cacheability import call_key, cost_points, immutability_points, reuse_points, score_calls
from tailscope.trace.demo import to_otlp_json

MS = 1_000_000


def test_the_methods_examples() -> None:
    assert reuse_points(320 / 1000) == pytest.approx(32.0)  # an FAQ retrieved in 320 of 1000 requests
    assert cost_points(200.0) == pytest.approx(30.0)  # an embedding of 200 ms
    assert cost_points(2.0) == 0.0  # a JSON serialisation of 2 ms
    assert immutability_points(30 * 86400) == pytest.approx(25.0, abs=1.0)  # a catalogue updated monthly
    assert immutability_points(0.5) == 0.0  # real-time data
    assert immutability_points(None) == 0.0


def test_call_keys_compare_arguments_not_templates() -> None:
    assert call_key({"gen_ai.operation.name": "execute_tool"}) is None
    assert call_key({"db.query.text": "SELECT * FROM t WHERE id = $1"}) is None
    assert call_key({"db.query.text": "SELECT * FROM t WHERE id = $1", "db.query.parameter.0": "7"}) is not None
    assert call_key({"gen_ai.tool.call.arguments": '{"q": "refund"}'}) == call_key(
        {"gen_ai.tool.call.arguments": '{"q": "refund"}', "gen_ai.tool.call.id": "call_1"}
    )


def test_reuse_counts_repeats_within_the_window() -> None:
    calls = [("faq", k * 1000, 200 * MS, "a") for k in range(4)] + [("faq", 10**15, 200 * MS, "a")]
    [row] = score_calls(calls, window_ns=1e9, ttl_s={"faq": 30 * 86400})
    assert row["reuse_share"] == pytest.approx(3 / 5)  # the last call is far outside the window
    assert row["candidate"]
    assert row["score"] == pytest.approx(40 + 30 + row["immutability"], abs=0.2)  # 60 % reuse: capped at 40


def _file(tmp_path: Path) -> Path:
    rng = random.Random(3)
    spans = []
    for k in range(300):
        tid = f"{k + 1:032x}"
        t0 = k * 10_000 * MS
        faq, web = 250 * MS, int(rng.uniform(100, 200) * MS)
        spans.append(Span(tid, f"{k:08x}00000001", None, "POST /chat", t0, t0 + faq + web + 2 * MS, service="gw",
                          kind="SERVER"))  # fmt: skip
        q = rng.choice(["refund", "shipping", "hours"])
        spans.append(Span(tid, f"{k:08x}00000002", f"{k:08x}00000001", "faq lookup", t0 + MS, t0 + MS + faq,
                          attributes={"gen_ai.tool.call.arguments": json.dumps({"q": q})}))  # fmt: skip
        unique = {"gen_ai.tool.call.arguments": f'{{"q": "{k}"}}'}
        spans.append(Span(tid, f"{k:08x}00000003", f"{k:08x}00000001", "web search", t0 + MS + faq,
                          t0 + MS + faq + web, attributes=unique))  # fmt: skip
    path = tmp_path / "c.otlp.json"
    path.write_text(json.dumps(to_otlp_json(spans)))
    return path


def test_cacheability_of_a_file(tmp_path: Path) -> None:
    r = tailscope.cacheability(_file(tmp_path), ttl=["faq lookup=30d", "web search=30d"], window="1h")
    rows = {row["operation"]: row for row in r.operations}
    assert rows["faq lookup"]["reuse_share"] > 0.95  # three questions asked 300 times
    assert rows["web search"]["reuse_share"] == 0.0  # every query differs
    assert r.candidates == ["faq lookup"]
    w = rows["faq lookup"]["whatif"]
    assert w["p95_after_ms"] < w["p95_before_ms"]
    assert w["change"].startswith('--cache "faq lookup=')


def test_bad_flags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'^--ttl .*expected "OP=30d"'):
        tailscope.cacheability(_file(tmp_path), ttl=["faq lookup"])
    with pytest.raises(ConfigError, match=r"^--change-rate .*OP=4/d"):
        tailscope.cacheability(_file(tmp_path), change_rate=["faq lookup=4/week"])


def test_unknown_ttl_and_change_rate_operations_are_bad_input(tmp_path: Path) -> None:
    """An operation of --ttl/--change-rate that no span is named is bad input (the score looks TTLs up by exact
    name, so it would silently score nothing): one line naming the flag, the name and the close names — for a
    stored set before any span is read."""
    from tailscope.errors import UnknownOperationError
    from tailscope.store.spans import SpanStore

    path = _file(tmp_path)
    store = SpanStore(tmp_path / "s.duckdb")
    tailscope.ingest_traces([path], "c", store=store)
    for source, kw in ((path, {}), ("c", {"store": store})):
        with pytest.raises(UnknownOperationError) as err:
            tailscope.cacheability(source, ttl=["faq lookup=30d", "faq lokup=7d"], **kw)  # type: ignore[arg-type]
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith("--ttl \"faq lokup=7d\": no span is named 'faq lokup'")
        assert "did you mean 'faq lookup'?" in msg
        with pytest.raises(UnknownOperationError, match=r"^--change-rate \"Web Search=4/d\": .*'web search'"):
            tailscope.cacheability(source, change_rate=["Web Search=4/d"], **kw)  # type: ignore[arg-type]
    ok = tailscope.cacheability("c", store=store, ttl=["faq lookup=30d"], change_rate=["web search=4/d"])
    assert ok.candidates == ["faq lookup"]
