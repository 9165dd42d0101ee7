"""What-if summaries per root operation (``root_ops``), and sets whose root is a bench client span
(``bench --trace-context on --otlp-endpoint``: the client's CLIENT span above the server's tree)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.records import Span
from tailscope.trace.demo import to_otlp_json

MS = 1_000_000
AUTH_MS = 40


def _sid(trace: int, k: int) -> str:
    return f"{trace + 1:08x}{k:08x}"  # never all zeros (no span id in OTLP)


def _server(tid: str, trace: int, parent: str | None, t0: int, llm_ms: float, *, root: str) -> list[Span]:
    """The server's tree from ``t0``: ``root`` (SERVER) → ``auth`` (40 ms, in the gateway's service) → the engine's
    ``llm_request``."""
    auth_end = t0 + MS + AUTH_MS * MS
    llm_end = auth_end + MS + round(llm_ms * MS)
    return [
        Span(tid, _sid(trace, 1), parent, root, t0, llm_end + MS, service="gw", kind="SERVER"),
        Span(tid, _sid(trace, 2), _sid(trace, 1), "auth", t0 + MS, auth_end, service="gw"),
        Span(tid, _sid(trace, 3), _sid(trace, 1), "llm_request", auth_end + MS, llm_end, service="vllm",
             attributes={"gen_ai.request.model": "m"}),
    ]  # fmt: skip


def _client(tid: str, trace: int, server: list[Span], klass: str) -> Span:
    """The bench's CLIENT span (as :func:`tailscope.client.otlp.client_span` writes it) around the server's tree."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "tailscope.request.id": trace,
        "tailscope.request.class": klass,
    }
    return Span(tid, _sid(trace, 0), None, "chat m", server[0].start_ns - 2 * MS, server[0].end_ns + 3 * MS,
                service="tailscope-bench", kind="CLIENT", attributes=attrs)  # fmt: skip


def _write(tmp_path: Path, spans: list[Span]) -> Path:
    path = tmp_path / "t.otlp.json"
    path.write_text(json.dumps(to_otlp_json(spans)))
    return path


def test_root_ops_break_the_projection_down_per_root_operation(tmp_path: Path) -> None:
    rng = random.Random(3)
    spans: list[Span] = []
    for k in range(60):
        root = "POST /chat" if k % 3 else "POST /embed"  # 40 and 20 traces
        tid = f"{k + 1:032x}"
        server = _server(tid, k, None, 0, rng.uniform(100, 300), root=root)
        if root == "POST /embed":  # the embed route has no auth step
            server = [server[0], server[2]]
        spans.extend(server)
    path = _write(tmp_path, spans)
    r = tailscope.whatif(path, set_duration=[f"auth={AUTH_MS - 30}ms"], resamples=0)
    assert list(r.root_ops) == ["POST /chat", "POST /embed"]  # most traces first
    chat, embed = r.root_ops["POST /chat"], r.root_ops["POST /embed"]
    assert chat["before"]["count"] == 40
    assert embed["before"]["count"] == 20
    assert set(chat) == set(embed) == {"before", "after", "saving"}
    for stat in ("p50_ms", "p95_ms", "p99_ms"):
        assert chat["saving"][stat] == pytest.approx(30.0, abs=1e-3)  # every chat trace saves exactly 30 ms
        assert embed["saving"][stat] == 0
    with_ci = tailscope.whatif(path, set_duration=[f"auth={AUTH_MS - 30}ms"], resamples=50)
    for op in ("POST /chat", "POST /embed"):  # each root operation gets its own intervals
        row = with_ci.root_ops[op]["before"]
        assert row["p95_low_ms"] <= row["p95_ms"] <= row["p95_high_ms"]
    assert with_ci.root_ops["POST /chat"]["before"]["p50_ms"] > with_ci.root_ops["POST /embed"]["before"]["p50_ms"]
    only = tailscope.whatif(path, set_duration=[f"auth={AUTH_MS - 30}ms"], root_op="POST /chat", resamples=0)
    assert only.before == chat["before"]
    assert only.after == chat["after"]
    assert list(only.root_ops) == ["POST /chat"]
    assert only.root_ops["POST /chat"]["saving"] == only.saving


def _bench_set(tmp_path: Path, n: int = 40) -> Path:
    rng = random.Random(5)
    spans: list[Span] = []
    for k in range(n):
        tid = f"{k + 1:032x}"
        server = _server(tid, k, _sid(k, 0), 10 * MS, rng.uniform(100, 300), root="POST /v1/chat/completions")
        spans.append(_client(tid, k, server, "short" if k % 2 else "long"))
        spans.extend(server)
    return _write(tmp_path, spans)


def test_a_server_side_change_shows_at_the_bench_client_root(tmp_path: Path) -> None:
    path = _bench_set(tmp_path)
    r = tailscope.whatif(path, set_duration=[f"auth={AUTH_MS - 30}ms"], resamples=0)
    assert r.traces == 40
    assert list(r.root_ops) == ["chat m"]  # the client span is the root the latency is measured on
    for stat in ("p50_ms", "p95_ms", "p99_ms"):
        assert r.saving[stat] == pytest.approx(30.0, abs=1e-3)
    # the client span's own time (the wire, 5 ms a request) is kept: it is not the server's to save
    removed = tailscope.whatif(path, remove=["POST /v1/chat/completions"], resamples=0)
    assert removed.after["p99_ms"] == pytest.approx(5.0, abs=1e-3)
    # the request class the client span carries breaks the projection down
    assert set(r.classes) == {"short", "long"}
    assert all(c["saving"]["p50_ms"] == pytest.approx(30.0, abs=1e-3) for c in r.classes.values())


def test_rank_under_a_bench_client_root_proposes_the_server_steps(tmp_path: Path) -> None:
    path = _bench_set(tmp_path)
    r = tailscope.whatif(path, rank=True, resamples=0)
    sync = [c for c in r.candidates if c["kind"] == "shorten-sync"]
    assert [c["change"] for c in sync] == ['--set-duration "auth=5ms"']
    alone = tailscope.whatif(path, set_duration=["auth=5ms"], resamples=0)
    assert sync[0]["p95_saving_ms"] == pytest.approx(alone.saving["p95_ms"], abs=0.002)
    assert sync[0]["p95_saving_ms"] == pytest.approx(35.0, abs=1e-3)
    ops = {op for c in r.candidates for op in c["operations"]}
    assert "POST /v1/chat/completions" not in ops  # the server's whole request is no step to shorten
    assert "chat m" not in ops


def test_client_spans_as_bench_exports_them(tmp_path: Path) -> None:
    """The CLIENT spans :func:`tailscope.client.otlp.client_span` makes (encoded as ``bench --otlp-endpoint`` sends
    them, OTLP/JSON) with the server's spans below them in one file."""
    from tailscope.client.otlp import client_span, encode
    from tailscope.records import RequestRecord, Status

    t0 = 1_700_000_000 * 10**9
    rng = random.Random(9)
    server: list[Span] = []
    clients = []
    for k in range(30):
        tid, at = f"{k + 1:032x}", k * 10**9
        tree = _server(tid, k, _sid(k, 0), t0 + at + 2 * MS, rng.uniform(100, 300), root="POST /v1/chat/completions")
        server.extend(tree)
        end = tree[0].end_ns - t0 + 3 * MS
        rec = RequestRecord(id=k, scheduled_ns=at, sent_ns=at + MS, first_token_ns=end - 50 * MS, end_ns=end,
                            status=Status.OK, request_class="chat", stream_end_ns=end, trace_id=tid,
                            span_id=_sid(k, 0), output_tokens=10)  # fmt: skip
        cs = client_span(rec, t0_unix_ns=t0, model="m")
        assert cs is not None
        clients.append(cs)
    doc = to_otlp_json(server)
    doc["resourceSpans"].extend(
        json.loads(encode(clients, service="tailscope-bench", scope="tailscope.bench", protocol="json"))[
            "resourceSpans"
        ]
    )
    path = tmp_path / "bench.otlp.json"
    path.write_text(json.dumps(doc))
    r = tailscope.whatif(path, set_duration=[f"auth={AUTH_MS - 30}ms"], resamples=0)
    assert r.traces == 30
    assert list(r.root_ops) == ["chat m"]
    assert r.saving["p95_ms"] == pytest.approx(30.0, abs=1e-3)
    assert list(r.classes) == ["chat"]
    ranked = tailscope.whatif(path, rank=True, resamples=0)
    assert [c["change"] for c in ranked.candidates if c["kind"] == "shorten-sync"] == ['--set-duration "auth=5ms"']
