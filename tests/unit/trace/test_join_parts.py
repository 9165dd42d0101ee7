"""The client/tree join: parts that add up exactly, never negative, skew handled, unjoined requests counted."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.records import RequestRecord, Span, Status
from tailscope.trace.join import (
    NO_FIRST_TOKEN,
    NO_SPANS,
    NOT_TRACED,
    WARMUP,
    decompose,
    fit,
    join_records,
    window_path,
)

TID = "ab" * 16
CSPAN = "cd" * 8
MS = 1_000_000
T0 = 1_700_000_000_000_000_000  # the run start's Unix time (ns)


def _record(i: int = 0, *, sched: int = 0, sent: int = 1 * MS, first: int = 100 * MS, end: int = 300 * MS,
            trace: str | None = TID, warmup: bool = False, ok: bool = True) -> RequestRecord:  # fmt: skip
    return RequestRecord(
        id=i, scheduled_ns=sched, sent_ns=sent, first_token_ns=first if ok else None, end_ns=end,
        status=Status.OK if ok else Status.ERROR, trace_id=trace, span_id=CSPAN if trace else None, warmup=warmup,
    )  # fmt: skip


def _engine(start: int, end: int, *, ttft: float, queue: float, prefill: float, decode: float, parent: str) -> Span:
    return Span(
        trace_id=TID, span_id="e1" * 8, parent_id=parent, name="llm_request", start_ns=start, end_ns=end,
        kind="SERVER", layer="inference",
        attributes={
            "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.time_in_queue": queue,
            "gen_ai.latency.time_in_model_prefill": prefill, "gen_ai.latency.time_in_model_decode": decode,
        },
    )  # fmt: skip


def test_engine_only_trace_splits_ttft_into_client_network_frontend_queue_prefill() -> None:
    # client: sent at 1 ms, first token at 100 ms, last at 300 ms; server span (Unix) from T0+31 ms
    start = T0 + 31 * MS
    eng = _engine(start, start + 260 * MS, ttft=0.060, queue=0.010, prefill=0.045, decode=0.200, parent=CSPAN)
    p = decompose(_record(), [eng], t0_unix_ns=T0)
    assert not isinstance(p, str)
    assert p.ttft_ns == 100 * MS
    assert p.ttft_parts_ns == {
        "client": 1 * MS, "network": 39 * MS, "frontend": 5 * MS, "queue": 10 * MS, "prefill": 45 * MS,
        "unexplained": 0,
    }  # fmt: skip
    assert sum(p.ttft_parts_ns.values()) == p.ttft_ns
    assert p.e2e_ns == 300 * MS
    assert p.e2e_parts_ns["decode"] == 200 * MS
    assert sum(p.e2e_parts_ns.values()) == p.e2e_ns
    assert p.network_request_ns == 30 * MS  # sent at T0+1 ms, server start at T0+31 ms
    assert p.network_response_ns == 9 * MS  # engine first token at T0+91 ms, client at T0+100 ms
    assert not p.skew_suspected


def test_layers_before_the_engine_are_on_the_path() -> None:
    root = Span(TID, "g1" * 8, CSPAN, "POST /chat", T0 + 10 * MS, T0 + 200 * MS, kind="SERVER", layer="gateway")
    ret = Span(TID, "r1" * 8, root.span_id, "search", T0 + 12 * MS, T0 + 32 * MS, layer="retrieval")
    eng = _engine(T0 + 35 * MS, T0 + 190 * MS, ttft=0.050, queue=0.0, prefill=0.050, decode=0.1, parent=root.span_id)
    p = decompose(_record(), [root, ret, eng], t0_unix_ns=T0)
    assert not isinstance(p, str)
    parts = p.ttft_parts_ns
    assert parts["retrieval"] == 20 * MS
    assert parts["gateway"] == 5 * MS  # 10→12 and 32→35
    assert parts["prefill"] == 50 * MS
    assert sum(parts.values()) == 100 * MS


def test_skew_gives_no_negative_part_and_says_so() -> None:
    # the server's span (and its first token) lasts longer than the client's whole window
    eng = _engine(T0 - 50 * MS, T0 + 400 * MS, ttft=0.200, queue=0.05, prefill=0.1, decode=0.2, parent=CSPAN)
    p = decompose(_record(), [eng], t0_unix_ns=T0)
    assert not isinstance(p, str)
    assert p.skew_suspected
    assert p.ttft_parts_ns["network"] == 0
    assert all(v >= 0 for v in p.ttft_parts_ns.values())
    assert sum(p.ttft_parts_ns.values()) == p.ttft_ns
    assert sum(p.e2e_parts_ns.values()) == p.e2e_ns
    assert p.network_request_ns is None
    assert p.notes


def test_no_first_token_time_goes_to_unexplained() -> None:
    span = Span(TID, "s1" * 8, CSPAN, "POST /x", T0 + 5 * MS, T0 + 250 * MS, kind="SERVER", layer="gateway")
    p = decompose(_record(), [span])
    assert not isinstance(p, str)
    assert p.ttft_parts_ns == {"client": 1 * MS, "network": 0, "unexplained": 99 * MS}
    assert p.e2e_parts_ns["gateway"] == 245 * MS


def test_unjoined_requests_are_counted_with_reasons() -> None:
    eng = _engine(T0, T0 + 100 * MS, ttft=0.05, queue=0, prefill=0.05, decode=0.05, parent=CSPAN)
    recs = [
        _record(0),
        _record(1, trace=None),
        _record(2, ok=False),
        _record(3, trace="ee" * 16),
        _record(4, warmup=True),
    ]
    s = join_records(recs, {TID: [eng]})
    assert s.requests == 4
    assert s.joined == 1
    assert s.unjoined == {NOT_TRACED: 1, NO_FIRST_TOKEN: 1, NO_SPANS: 1, WARMUP: 1}
    assert dict(s.unjoined_ids) == {1: NOT_TRACED, 2: NO_FIRST_TOKEN, 3: NO_SPANS}
    doc = s.to_dict()
    assert doc["per_request"][0]["request_id"] == 0
    assert set(doc["ttft_ms"]) >= {"client", "network", "prefill", "total"}
    assert doc["explain_ttft_p99"]["parts"][0]["part"] == "prefill"


def test_fit_scales_to_the_total_exactly() -> None:
    assert fit({"a": 3, "b": 3, "c": 3}, 7) == {"a": 3, "b": 2, "c": 2}
    assert fit({"a": 1}, 5) == {"a": 1}


# ---- properties ------------------------------------------------------------------------------------------------

_ms = st.integers(min_value=0, max_value=500)


@st.composite
def _trees(draw: st.DrawFn) -> list[Span]:
    """A random tree of up to 8 spans (children may overlap, stick out of their parent or be parallel)."""
    n = draw(st.integers(1, 8))
    spans: list[Span] = []
    for k in range(n):
        a = draw(_ms) * MS
        b = a + draw(_ms) * MS
        parent = CSPAN if k == 0 else spans[draw(st.integers(0, k - 1))].span_id
        attrs = {}
        if draw(st.booleans()):
            attrs = {
                "gen_ai.latency.time_to_first_token": draw(_ms) / 1000,
                "gen_ai.latency.time_in_queue": draw(_ms) / 1000,
                "gen_ai.latency.time_in_model_prefill": draw(_ms) / 1000,
                "gen_ai.latency.time_in_model_decode": draw(_ms) / 1000,
            }
        layer = draw(st.sampled_from(["gateway", "retrieval", "agent", "inference", "network", "other", "weird"]))
        spans.append(Span(TID, f"{k + 1:016x}", parent, f"s{k}", T0 + a, T0 + b, layer=layer, attributes=attrs))
    return spans


@settings(max_examples=300, deadline=None)
@given(
    _trees(),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(1, 900),
    st.integers(0, 900),
    st.booleans(),
)
def test_parts_sum_exactly_and_are_never_negative(
    spans: list[Span], sched: int, lag: int, ttft: int, tail: int, with_t0: bool
) -> None:
    r = _record(sched=sched * MS, sent=(sched + lag) * MS, first=(sched + lag + ttft) * MS,
                end=(sched + lag + ttft + tail) * MS)  # fmt: skip
    p = decompose(r, spans, t0_unix_ns=T0 if with_t0 else None)
    assert not isinstance(p, str)
    assert sum(p.ttft_parts_ns.values()) == p.ttft_ns == r.first_token_ns - r.scheduled_ns  # type: ignore[operator]
    assert all(v >= 0 for v in p.ttft_parts_ns.values())
    assert p.e2e_ns is not None
    assert sum(p.e2e_parts_ns.values()) == p.e2e_ns
    assert all(v >= 0 for v in p.e2e_parts_ns.values())


@settings(max_examples=200, deadline=None)
@given(_trees(), st.integers(0, 600), st.integers(0, 600))
def test_window_path_tiles_the_window(spans: list[Span], lo: int, width: int) -> None:
    kids: dict[str, list[Span]] = {}
    for s in spans[1:]:
        kids.setdefault(s.parent_id or "", []).append(s)
    a, b = T0 + lo * MS, T0 + (lo + width) * MS
    pieces = sorted((x, y) for _, x, y in window_path(spans[0], kids, a, b))
    assert sum(y - x for x, y in pieces) == b - a
    for (_, y0), (x1, _) in itertools.pairwise(pieces):
        assert y0 == x1  # no gap, no overlap


def test_an_engine_that_reports_phases_as_child_spans() -> None:
    eng = Span(TID, "e2" * 8, CSPAN, "generate", T0 + 20 * MS, T0 + 250 * MS, service="sglang", layer="inference")
    q = Span(TID, "q1" * 8, eng.span_id, "Queue Wait", T0 + 22 * MS, T0 + 40 * MS, service="sglang", layer="inference")
    pf = Span(TID, "p1" * 8, eng.span_id, "Prefill Forward", T0 + 40 * MS, T0 + 90 * MS, layer="inference")
    dc = Span(TID, "d1" * 8, eng.span_id, "Decode Forward", T0 + 90 * MS, T0 + 240 * MS, layer="inference")
    p = decompose(_record(), [eng, q, pf, dc], t0_unix_ns=T0)
    assert not isinstance(p, str)
    assert p.ttft_parts_ns["queue"] == 18 * MS
    assert p.ttft_parts_ns["prefill"] == 50 * MS
    assert p.ttft_parts_ns["inference"] == 2 * MS  # the engine span's own time before the queue
    assert p.ttft_parts_ns["network"] == 99 * MS - 70 * MS
    assert p.e2e_parts_ns["decode"] == 150 * MS
    assert sum(p.e2e_parts_ns.values()) == p.e2e_ns


def test_opening_the_connection_is_taken_out_of_the_network_part() -> None:
    from dataclasses import replace

    start = T0 + 31 * MS
    eng = _engine(start, start + 260 * MS, ttft=0.060, queue=0.010, prefill=0.045, decode=0.200, parent=CSPAN)
    r = replace(_record(), connection_reused=False, dns_ns=20 * MS, connect_ns=1 * MS, tls_ns=None)
    p = decompose(r, [eng], t0_unix_ns=T0)
    assert not isinstance(p, str)
    assert (p.ttft_parts_ns["connection"], p.ttft_parts_ns["network"]) == (21 * MS, 18 * MS)
    assert sum(p.ttft_parts_ns.values()) == p.ttft_ns
    assert p.e2e_parts_ns["connection"] == 21 * MS
    assert sum(p.e2e_parts_ns.values()) == p.e2e_ns
    assert p.network_request_ns == 9 * MS  # 30 ms up, of which 21 ms opening the connection
    # a set-up longer than the whole network part (clocks, rounding) never makes a part negative
    big = decompose(replace(r, dns_ns=500 * MS), [eng], t0_unix_ns=T0)
    assert not isinstance(big, str)
    assert big.ttft_parts_ns["network"] == 0
    assert min(big.ttft_parts_ns.values()) >= 0
