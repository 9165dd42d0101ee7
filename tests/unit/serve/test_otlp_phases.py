"""The engine's phase spans (``serve --otlp-spans phases``): receive, queue, one prefill per chunk, decode, stream end.

The builder on hand-made timelines (chunk boundaries, nesting, the phases adding up to the parent's figures), the
engine loop recording chunks from the real engine's step timeline, and the join and critical path seeing the same
decomposition with and without the child spans.
"""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from tailscope.client.otlp import OtlpSpan, encode
from tailscope.errors import ConfigError
from tailscope.records import RequestRecord, Span, Status
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.loop import EngineLoop, LiveRequest
from tailscope.serve.metrics import ServeMetrics
from tailscope.serve.options import ServeOptions
from tailscope.serve.otlp import PrefillChunk, RequestTiming, encode_spans, request_spans, span_attributes
from tailscope.trace.ingest.common import ParseContext, row_span
from tailscope.trace.ingest.otlp import parse_otlp_proto
from tailscope.trace.join import decompose

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"
MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _chunk(start_ms: float, end_ms: float, tokens: int, computed: int) -> PrefillChunk:
    return PrefillChunk(T0 + int(start_ms * MS), T0 + int(end_ms * MS), tokens, computed, tokens, 3)


def _timing(**kw: object) -> RequestTiming:
    """Received at 0, engine hand-off at 2 ms, scheduled at 5 ms, three chunks (5-10, 10-15, 15-21 ms; the first token
    released at 22 ms, 1 ms after the last step's due end), last token at 122 ms."""
    base: dict[str, object] = dict(
        trace_id=TID, parent_span_id=SID, request_id="r1", received_ns=T0, queued_ns=T0 + 2 * MS,
        scheduled_ns=T0 + 5 * MS, first_token_ns=T0 + 22 * MS, last_token_ns=T0 + 122 * MS, end_ns=T0 + 122 * MS,
        prompt_tokens=600, completion_tokens=16, max_tokens=16, finish_reason="length",
        chunks=(_chunk(5, 10, 256, 0), _chunk(10, 15, 256, 256), _chunk(15, 21, 88, 512)),
    )  # fmt: skip
    base.update(kw)
    return RequestTiming(**base)  # type: ignore[arg-type]


def _spans(t: RequestTiming) -> tuple[OtlpSpan, list[OtlpSpan]]:
    spans = request_spans([t], model="m", span_ids=random.Random(3))
    return spans[0], spans[1:]


def _check_nesting(parent: OtlpSpan, children: list[OtlpSpan]) -> None:
    """Every child inside the parent; siblings (same parent) never overlap."""
    ids = {parent.span_id} | {c.span_id for c in children}
    by_parent: dict[str, list[OtlpSpan]] = {}
    for c in children:
        assert c.trace_id == parent.trace_id
        assert c.parent_span_id in ids
        assert parent.start_ns <= c.start_ns <= c.end_ns <= parent.end_ns, c
        by_parent.setdefault(c.parent_span_id or "", []).append(c)
    for group in by_parent.values():
        group.sort(key=lambda s: (s.start_ns, s.end_ns))
        for a, b in itertools.pairwise(group):
            assert a.end_ns <= b.start_ns, (a.name, b.name)


def test_one_span_per_phase_and_one_prefill_span_per_chunk() -> None:
    parent, kids = _spans(_timing())
    assert parent.name == "llm_request"
    assert [s.name for s in kids] == ["receive", "queue", "prefill", "prefill", "prefill", "decode", "stream end"]
    assert all(s.parent_span_id == parent.span_id and s.kind == 1 for s in kids)
    _check_nesting(parent, kids)
    receive, queue, p0, p1, p2, decode, end = kids
    assert (receive.start_ns - T0, receive.end_ns - T0) == (0, 2 * MS)
    assert (queue.start_ns - T0, queue.end_ns - T0) == (2 * MS, 5 * MS)
    # chunk boundaries are the engine's step boundaries; the last chunk ends at the first token's release
    assert [(s.start_ns - T0, s.end_ns - T0) for s in (p0, p1, p2)] == [(5 * MS, 10 * MS), (10 * MS, 15 * MS),
                                                                       (15 * MS, 22 * MS)]  # fmt: skip
    assert [s.attributes["tailscope.prefill.chunk_tokens"] for s in (p0, p1, p2)] == [256, 256, 88]
    assert [s.attributes["tailscope.prefill.computed_tokens"] for s in (p0, p1, p2)] == [0, 256, 512]
    assert [s.attributes["tailscope.prefill.chunk"] for s in (p0, p1, p2)] == [0, 1, 2]
    assert p0.attributes["tailscope.step.decode_seqs"] == 3
    assert (decode.start_ns - T0, decode.end_ns - T0) == (22 * MS, 122 * MS)
    assert decode.attributes["gen_ai.usage.completion_tokens"] == 16
    assert end.start_ns == end.end_ns == parent.end_ns
    assert end.attributes["tailscope.finish_reason"] == "length"
    assert not end.error
    for s in kids:  # the inference layer wherever the set is read: GenAI attributes on every span
        assert s.attributes["gen_ai.request.id"] == "r1"
        assert s.attributes["gen_ai.response.model"] == "m"
    # the parent is exactly the single span of --otlp-spans request
    only = request_spans([_timing()], model="m", span_ids=random.Random(3), phases=False)
    assert only == [parent]


def test_phases_add_up_to_the_parents_figures() -> None:
    t = _timing()
    parent, kids = _spans(t)
    a = span_attributes(t, "m")
    dur = {name: sum(s.end_ns - s.start_ns for s in kids if s.name == name) for name in ("queue", "prefill", "decode")}
    assert dur["queue"] == round(a["gen_ai.latency.time_in_queue"] * 1e9)
    assert dur["prefill"] == round(a["gen_ai.latency.time_in_model_prefill"] * 1e9)  # contiguous chunks: no gap
    assert dur["decode"] == round(a["gen_ai.latency.time_in_model_decode"] * 1e9)
    receive = next(s for s in kids if s.name == "receive")
    assert sum(s.end_ns - s.start_ns for s in kids) + 0 == parent.end_ns - parent.start_ns
    assert receive.end_ns - receive.start_ns + sum(dur.values()) == round(a["gen_ai.latency.e2e"] * 1e9)


def test_chunks_are_clamped_into_order_and_into_the_parent() -> None:
    # a step that started before the request reached the engine (the loop catching up) counts from the hand-off;
    # a gap between chunks (another request's chunk took the budget) stays a gap under the parent
    t = _timing(chunks=(_chunk(3, 10, 256, 0), _chunk(12, 15, 256, 256), _chunk(14, 21, 88, 512)))
    parent, kids = _spans(t)
    _check_nesting(parent, kids)
    pre = [s for s in kids if s.name == "prefill"]
    assert pre[0].start_ns == t.scheduled_ns
    assert pre[1].start_ns == T0 + 12 * MS  # the gap 10-12 ms is the parent's own (still prefill by its figures)
    assert pre[2].start_ns == pre[1].end_ns  # overlapping stamps clamped: no two siblings overlap
    assert pre[-1].end_ns == t.first_token_ns


def test_recompute_after_preemption_nests_under_decode() -> None:
    later = (_chunk(60, 70, 256, 0), _chunk(70, 80, 380, 256))
    t = _timing(chunks=_timing().chunks + later)
    parent, kids = _spans(t)
    _check_nesting(parent, kids)
    decode = next(s for s in kids if s.name == "decode")
    re = [s for s in kids if s.parent_span_id == decode.span_id]
    assert [s.name for s in re] == ["prefill", "prefill"]
    assert all(s.attributes["tailscope.prefill.recompute"] is True for s in re)
    assert [s.attributes["tailscope.prefill.chunk"] for s in re] == [0, 1]
    assert sum(1 for s in kids if s.name == "prefill" and s.parent_span_id == parent.span_id) == 3


def test_partial_timelines() -> None:
    # aborted while in prefill: no first token, no decode; the stream end marks the abort
    t = _timing(first_token_ns=None, last_token_ns=None, end_ns=T0 + 12 * MS, aborted=True, finish_reason=None,
                completion_tokens=0, chunks=(_chunk(5, 10, 256, 0), _chunk(10, 15, 256, 256)))  # fmt: skip
    parent, kids = _spans(t)
    _check_nesting(parent, kids)
    assert [s.name for s in kids] == ["receive", "queue", "prefill", "prefill", "stream end"]
    assert kids[-1].error
    assert kids[-1].attributes["tailscope.finish_reason"] == "abort"
    assert kids[3].end_ns == parent.end_ns  # clipped to the parent
    # an engine that reports no admissions: no queue or prefill spans rather than wrong ones
    _, kids = _spans(_timing(scheduled_ns=None, chunks=()))
    assert [s.name for s in kids] == ["receive", "decode", "stream end"]
    # one output token: no decode span
    _, kids = _spans(_timing(last_token_ns=T0 + 22 * MS, end_ns=T0 + 22 * MS, completion_tokens=1))
    assert [s.name for s in kids][-2:] == ["prefill", "stream end"]


def test_encoded_phase_spans_parse_back_in_the_inference_layer() -> None:
    body = encode_spans([_timing()], model="m", service="svc", span_ids=random.Random(1), phases=True)
    spans = [row_span(r) for r in parse_otlp_proto(body, ParseContext(source="test"))]
    assert len(spans) == 8
    assert {s.layer for s in spans} == {"inference"}
    root = next(s for s in spans if s.name == "llm_request")
    assert all(s.parent_id == root.span_id for s in spans if s is not root)


def _as_spans(otlp: list[OtlpSpan]) -> list[Span]:
    """``otlp`` through the OTLP protobuf encoder and the ingest, as ``trace collect`` stores them."""
    body = encode(otlp, service="tailscope-serve", scope="test")
    return [row_span(r) for r in parse_otlp_proto(body, ParseContext(source="test"))]


def test_join_decomposition_is_the_same_with_and_without_phase_spans() -> None:
    client = f"{0xABC:016x}"
    t = _timing(parent_span_id=client)
    # the client: scheduled and sent 10 ms before the server's arrival, first token 5 ms after the engine's
    t0 = T0 - 10 * MS
    record = RequestRecord(
        id=1, scheduled_ns=0, sent_ns=0, first_token_ns=(t.first_token_ns or 0) + 5 * MS - t0,
        end_ns=(t.last_token_ns or 0) + 5 * MS - t0, status=Status.OK, trace_id=TID, span_id=client,
    )  # fmt: skip
    with_phases = decompose(record, _as_spans(request_spans([t], model="m", span_ids=random.Random(1))))
    alone = decompose(record, _as_spans(request_spans([t], model="m", span_ids=random.Random(1), phases=False)))
    assert not isinstance(with_phases, str)
    assert not isinstance(alone, str)
    assert with_phases.ttft_parts_ns == alone.ttft_parts_ns
    assert with_phases.e2e_parts_ns == alone.e2e_parts_ns
    parts = with_phases.ttft_parts_ns
    assert sum(parts.values()) == with_phases.ttft_ns
    assert (parts["frontend"], parts["queue"], parts["prefill"]) == (2 * MS, 3 * MS, 17 * MS)
    assert with_phases.e2e_parts_ns["decode"] == 100 * MS


def test_critical_path_counts_the_phases_once_as_inference() -> None:
    from tailscope.trace.critical_path import critical_path
    from tailscope.trace.tree import build_tree

    t = _timing()
    spans = _as_spans(request_spans([t], model="m", span_ids=random.Random(1)))
    tree = build_tree(spans)
    path = critical_path(tree)
    assert path.total_ns == t.end_ns - t.received_ns  # the children tile the parent: nothing counted twice
    layers = {tree.layers[i] for i in range(len(spans))}
    assert layers == {"inference"}
    assert sum(path.exclusive_ns.values()) == path.total_ns


def _serve_one(engine: object) -> tuple[EngineLoop, LiveRequest]:
    """A 1000-token prompt with 4 output tokens through the engine loop at 20 × speed, chunks recorded."""

    async def main() -> tuple[EngineLoop, LiveRequest]:
        loop = EngineLoop(engine, ServeMetrics("m", max_model_len=4096), speed=20.0, record_chunks=True)  # type: ignore[arg-type]
        loop.start()
        live = loop.submit(prompt_tokens=1000, output_tokens=4)
        await asyncio.wait_for(live.wait_finished(), 30)
        await loop.stop()
        return loop, live

    return asyncio.run(main())


def test_the_loop_records_the_engines_chunks() -> None:
    """The real engine with a 256-token budget runs a 1000-token prompt in 4 chunks, in back-to-back steps."""
    engine, _options = build_replica(
        "llama-3.1-8b", "h100-sxm", max_num_batched_tokens=256, max_num_seqs=16, speed=20.0
    )
    loop, live = _serve_one(engine)
    assert loop.record_chunks
    assert live.done
    assert live.chunks is not None
    assert [(c[2], c[3]) for c in live.chunks] == [(256, 0), (256, 256), (256, 512), (232, 768)]
    # exact engine step times: each chunk starts where the previous ended, unless the loop fell so far behind (a
    # stalled host) that it restarted the engine timeline at "now" (then later, never earlier)
    caught_up = loop.metrics.loop_lag_max_s < 0.2  # the loop restarts the timeline past 0.25 s behind
    for prev, nxt in itertools.pairwise(live.chunks):
        assert prev[0] < prev[1] <= nxt[0]
        assert prev[1] == nxt[0] or not caught_up
    assert live.chunks[0][0] <= (live.scheduled_ns or 0) <= live.chunks[0][1]
    assert live.chunks[-1][1] <= (live.first_token_ns or 0)  # released at or after the step's due end
    # off by default: the engine is not even asked
    engine2, _ = build_replica("llama-3.1-8b", "h100-sxm")
    plain = EngineLoop(engine2, ServeMetrics("m", max_model_len=4096))
    assert not plain.record_chunks
    assert getattr(engine2, "on_chunk", None) is None


def test_otlp_spans_option_is_validated() -> None:
    with pytest.raises(ConfigError, match="--otlp-spans"):
        ServeOptions(model_name="m", otlp_spans="all").validate()
    ServeOptions(model_name="m", otlp_spans="request").validate()


def test_a_disaggregated_request_shows_its_kv_transfer_and_the_decode_ranks_first_step() -> None:
    """The prefill rank's chunks, then ``kv transfer``, ``queue (decode rank)`` and the decode rank's one-token chunk
    (whose step samples the first token): tiling the parent's prefill figure, each chunk naming its pool."""
    chunks = (
        PrefillChunk(T0 + 5 * MS, T0 + 12 * MS, 256, 0, 256, 0, "prefill"),
        PrefillChunk(T0 + 12 * MS, T0 + 18 * MS, 256, 256, 256, 0, "prefill"),
        PrefillChunk(T0 + 24 * MS, T0 + 30 * MS, 1, 599, 1, 5, "decode"),
    )
    t = _timing(chunks=chunks, kv_transfer=(T0 + 18 * MS, T0 + 21 * MS), first_token_ns=T0 + 30 * MS)
    parent, kids = _spans(t)
    _check_nesting(parent, kids)
    names = [(k.name, (k.start_ns - T0) // MS, (k.end_ns - T0) // MS) for k in kids]
    assert names == [
        ("receive", 0, 2), ("queue", 2, 5), ("prefill", 5, 12), ("prefill", 12, 18), ("kv transfer", 18, 21),
        ("queue (decode rank)", 21, 24), ("prefill", 24, 30), ("decode", 30, 122), ("stream end", 122, 122),
    ]  # fmt: skip
    pools = [k.attributes.get("tailscope.pool") for k in kids if k.name == "prefill"]
    assert pools == ["prefill", "prefill", "decode"]
    between = [k for k in kids if k.name not in ("receive", "queue", "decode", "stream end")]
    prefill_s = parent.attributes["gen_ai.latency.time_in_model_prefill"]
    assert sum(k.end_ns - k.start_ns for k in between) == round(prefill_s * 1e9)  # they tile the parent's figure
    assert next(k for k in kids if k.name == "kv transfer").attributes["tailscope.kv.prompt_tokens"] == 600
    # an aggregated timing is unchanged: no pool attribute, no transfer
    _, plain = _spans(_timing())
    assert all("tailscope.pool" not in k.attributes for k in plain)
    assert "kv transfer" not in {k.name for k in plain}


def test_the_loop_records_a_disaggregated_engines_ranks_and_transfer() -> None:
    """``serve --disagg``: the chunks carry their rank step's times (not the composite step's) and pool, the KV
    transfer is stamped, and the queue ends when the prefill rank's step starts."""
    engine, _options = build_replica(
        "llama-3.1-8b", "h100-sxm", max_num_batched_tokens=256, max_num_seqs=16, speed=20.0,
        disagg="prefill=1x1,decode=1x1",
    )  # fmt: skip
    loop, live = _serve_one(engine)
    assert loop.record_chunks
    assert live.done
    assert live.chunks is not None
    assert [(c[2], c[3], c[6]) for c in live.chunks] == [
        (256, 0, "prefill"), (256, 256, "prefill"), (256, 512, "prefill"), (232, 768, "prefill"), (1, 999, "decode"),
    ]  # fmt: skip
    assert live.kv_transfer is not None
    sent, there = live.kv_transfer
    assert live.chunks[3][1] == sent < there <= live.chunks[4][0]  # the KV leaves when the last prefill chunk ends
    assert live.scheduled_ns == max(live.chunks[0][0], live.queued_ns)  # the prefill rank's own step start
    for prev, nxt in itertools.pairwise(live.chunks[:4]):
        assert prev[0] < prev[1] <= nxt[0]
    assert live.chunks[4][1] <= (live.first_token_ns or 0)


def test_the_loop_records_attention_dp_ranks_chunks_as_aggregated_ones() -> None:
    """``serve --attention-dp 2``: the rank's chunks, on its own step times, with no pool and no KV transfer."""
    engine, _options = build_replica(
        "llama-3.1-8b", "h100-sxm", max_num_batched_tokens=256, max_num_seqs=16, speed=20.0, attention_dp=2
    )
    loop, live = _serve_one(engine)
    assert loop.record_chunks
    assert live.chunks is not None
    assert [(c[2], c[3], c[6]) for c in live.chunks] == [(256, 0, ""), (256, 256, ""), (256, 512, ""), (232, 768, "")]
    assert live.kv_transfer is None
    assert live.chunks[-1][1] <= (live.first_token_ns or 0)
