"""Per-request engine spans of ``tailscope serve --otlp-endpoint``, exported over OTLP/HTTP (protobuf).

Each finished request becomes one ``llm_request`` span of kind SERVER, named and attributed as vLLM names its own
request spans: ``gen_ai.latency.time_in_queue``, ``…time_to_first_token``, ``…time_in_model_prefill``,
``…time_in_model_decode``, ``…time_in_model_inference`` and ``…e2e`` (seconds), ``gen_ai.usage.prompt_tokens`` /
``completion_tokens``, ``gen_ai.request.id`` / ``max_tokens`` and ``gen_ai.response.model``. When the request carried
a W3C ``traceparent`` the span joins that trace as a child of the caller's span; without one it starts a trace of its
own, and a ``traceparent`` whose sampled flag is off is honoured (no span).

With ``phases`` (``--otlp-spans phases``, the default) the ``llm_request`` span also gets the engine's phases as
INTERNAL child spans, from the engine's own step timeline (:func:`phase_spans`): ``receive`` (arrival → engine
hand-off: the API server), ``queue`` (hand-off → the start of the step that first schedules it), one ``prefill`` per
prefill chunk (that step's start → its end; the last ends at the first token), ``decode`` (first → last token; the
chunks of a re-prefill after a preemption are its children) and ``stream end`` (a zero-length marker at the span's
end). They tile the parent without overlapping, so the parent's figures and any critical path are unchanged; each
carries ``gen_ai.request.id`` and ``gen_ai.response.model`` (the inference layer). On a disaggregated engine
(``serve --disagg``) the prefill chunks are the prefill rank's, then come ``kv transfer`` (the prompt's KV crossing to
the decode pool), ``queue (decode rank)`` (the decode worker taking it in) and the decode rank's one-token ``prefill``
chunk (the prompt's last token, whose step samples the first token); each chunk says its pool
(``tailscope.pool``), and the parent's ``time_in_model_prefill`` spans all of them, as the first token waits for
them all.

The handler only appends a tuple of numbers to a list (the hot path); a background task encodes batches with
``opentelemetry-proto`` (a core dependency) a few requests at a time between the event loop's other work and POSTs
them, every ``interval_s`` or as soon as ``max_batch`` spans wait. A collector that is down or slow loses spans
(counted in :attr:`SpanExporter.dropped`), never requests. No OpenTelemetry SDK is needed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tailscope.client.otlp import OtlpSender, OtlpSpan, encode
from tailscope.clock import Clock, unix_offset_ns

#: the instrumentation scope of the engine's spans
SCOPE = "tailscope.serve"


def parse_traceparent(value: str | None) -> tuple[str, str, bool] | None:
    """``(trace_id, parent_span_id, sampled)`` of a W3C ``traceparent`` header, or None when absent or invalid.

    Version ``00`` is parsed strictly; later versions by their first four fields, as the W3C spec asks.
    """
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff" or (parts[0] == "00" and len(parts) != 4):
        return None
    version, trace_id, span_id, flags = parts[0], parts[1].lower(), parts[2].lower(), parts[3]
    if len(trace_id) != 32 or len(span_id) != 16 or len(flags) != 2:
        return None
    try:
        int(version, 16)
        if int(trace_id, 16) == 0 or int(span_id, 16) == 0:
            return None
        sampled = bool(int(flags, 16) & 1)
    except ValueError:
        return None
    return trace_id, span_id, sampled


#: ``--otlp-spans``: the ``llm_request`` span alone, or with its phases as child spans
SPAN_MODES = ("request", "phases")


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """One prefill chunk of a request as the engine ran it (Unix ns).

    Attributes:
        start_ns / end_ns: its step's start and (due) end on the engine's timeline.
        tokens: prompt tokens the chunk computed.
        computed: tokens already in the KV cache before it (prefix-cache hit, earlier chunks).
        step_prefill_tokens / step_decode_seqs: the whole step's prefill tokens and decoding sequences (what the
            chunk shared its step with).
        pool: ``prefill`` or ``decode`` on a disaggregated engine (the rank that ran it); ``""`` aggregated.
    """

    start_ns: int
    end_ns: int
    tokens: int
    computed: int
    step_prefill_tokens: int
    step_decode_seqs: int
    pool: str = ""


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One served request's engine timeline (Unix ns) and facts: what its ``llm_request`` span reports.

    Attributes:
        received_ns: the HTTP request arrived (the span's start; vLLM's ``arrival_time``).
        queued_ns: the engine got it (after the API server's own latency).
        scheduled_ns: its first step started (end of the queue wait); None when the engine does not report it.
        first_token_ns / last_token_ns: first and last token released (None when none was).
        end_ns: the span's end (the last token, or when the request was dropped).
        chunks: its prefill chunks in the order the engine ran them (empty when not recorded).
        finish_reason: ``stop`` / ``length`` (None when aborted).
        kv_transfer: a disaggregated engine's KV transfer (left the prefill rank, reached the decode worker).
    """

    trace_id: str
    parent_span_id: str | None
    request_id: str
    received_ns: int
    queued_ns: int
    scheduled_ns: int | None
    first_token_ns: int | None
    last_token_ns: int | None
    end_ns: int
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int | None
    aborted: bool = False
    chunks: tuple[PrefillChunk, ...] = ()
    finish_reason: str | None = None
    kv_transfer: tuple[int, int] | None = None


def span_attributes(t: RequestTiming, model: str) -> dict[str, Any]:
    """vLLM's ``llm_request`` attributes for ``t`` (latencies in seconds; a part that did not happen is left out)."""
    a: dict[str, Any] = {
        "gen_ai.response.model": model,
        "gen_ai.request.id": t.request_id,
        "gen_ai.usage.prompt_tokens": t.prompt_tokens,
        "gen_ai.usage.completion_tokens": t.completion_tokens,
        "gen_ai.latency.e2e": (t.end_ns - t.received_ns) / 1e9,
    }
    if t.max_tokens is not None:
        a["gen_ai.request.max_tokens"] = t.max_tokens
    if t.scheduled_ns is not None:
        a["gen_ai.latency.time_in_queue"] = (t.scheduled_ns - t.queued_ns) / 1e9
    if t.first_token_ns is not None:
        a["gen_ai.latency.time_to_first_token"] = (t.first_token_ns - t.received_ns) / 1e9
        if t.scheduled_ns is not None:
            a["gen_ai.latency.time_in_model_prefill"] = (t.first_token_ns - t.scheduled_ns) / 1e9
        if t.last_token_ns is not None:
            a["gen_ai.latency.time_in_model_decode"] = (t.last_token_ns - t.first_token_ns) / 1e9
            if t.scheduled_ns is not None:
                a["gen_ai.latency.time_in_model_inference"] = (t.last_token_ns - t.scheduled_ns) / 1e9
    return a


def llm_request_spans(timings: list[RequestTiming], *, model: str, span_ids: random.Random) -> list[OtlpSpan]:
    """One SERVER ``llm_request`` span per timing (its parent the caller's span, when it sent one)."""
    return [_request_span(t, model, span_ids) for t in timings]


def _request_span(t: RequestTiming, model: str, span_ids: random.Random) -> OtlpSpan:
    return OtlpSpan(
        trace_id=t.trace_id,
        span_id=f"{span_ids.getrandbits(64) | 1:016x}",
        parent_span_id=t.parent_span_id or None,
        name="llm_request",
        kind=2,  # SPAN_KIND_SERVER
        start_ns=t.received_ns,
        end_ns=max(t.end_ns, t.received_ns),
        attributes=span_attributes(t, model),
        error=t.aborted,
    )


def phase_spans(t: RequestTiming, parent: OtlpSpan, *, model: str, span_ids: random.Random) -> list[OtlpSpan]:
    """The engine's phases of one request as INTERNAL children of its ``llm_request`` span ``parent``.

    ``receive``, ``queue``, one ``prefill`` per chunk, ``decode`` and ``stream end``, from the same stamps as the
    parent's attributes, so that ``queue`` lasts ``time_in_queue``, the ``prefill`` chunks and the gaps between them
    ``time_in_model_prefill`` and ``decode`` ``time_in_model_decode``. Every span lies inside the parent and no two
    siblings overlap (a chunk's times are clamped into order: a step that started before the request reached the
    engine counts from its hand-off). Chunks that run after the first token (a re-prefill after a preemption) are
    children of ``decode`` (``tailscope.prefill.recompute``). With ``t.kv_transfer`` (a disaggregated engine), ``kv
    transfer`` and ``queue (decode rank)`` come before the first chunk the decode pool ran. A phase whose stamps are
    missing is left out.
    """
    lo, hi = parent.start_ns, parent.end_ns
    base = {"gen_ai.request.id": t.request_id, "gen_ai.response.model": model}
    out: list[OtlpSpan] = []

    def add(
        name: str, start: int, end: int, attrs: dict[str, Any], *, under: str | None = None, error: bool = False
    ) -> OtlpSpan:
        start = min(max(start, lo), hi)
        span = OtlpSpan(
            trace_id=t.trace_id,
            span_id=f"{span_ids.getrandbits(64) | 1:016x}",
            parent_span_id=under or parent.span_id,
            name=name,
            kind=1,  # SPAN_KIND_INTERNAL
            start_ns=start,
            end_ns=min(max(end, start), hi),
            attributes={**base, **attrs},
            error=error,
        )
        out.append(span)
        return span

    queued = min(max(t.queued_ns, lo), hi)
    add("receive", lo, queued, {})
    if t.scheduled_ns is not None:
        scheduled = min(max(t.scheduled_ns, queued), hi)
        add("queue", queued, scheduled, {})
        first = t.first_token_ns
        initial = [c for c in t.chunks if first is None or c.start_ns < first]
        later = [c for c in t.chunks if first is not None and c.start_ns >= first]
        cursor = scheduled
        handed = t.kv_transfer is None
        for k, c in enumerate(initial):
            if not handed and c.pool == "decode" and t.kv_transfer is not None:
                handed = True
                sent, there = t.kv_transfer
                span = add("kv transfer", max(sent, cursor), there, {"tailscope.kv.prompt_tokens": t.prompt_tokens})
                span = add("queue (decode rank)", span.end_ns, c.start_ns, {})
                cursor = span.end_ns
            end = first if k == len(initial) - 1 and first is not None else c.end_ns
            span = add("prefill", max(c.start_ns, cursor), end, _chunk_attributes(k, c))
            cursor = span.end_ns
    else:
        first, later = t.first_token_ns, []
    if first is not None and t.last_token_ns is not None and t.last_token_ns > first:
        decode = add("decode", first, t.last_token_ns, {"gen_ai.usage.completion_tokens": t.completion_tokens})
        cursor = decode.start_ns
        for k, c in enumerate(later):
            attrs = {**_chunk_attributes(k, c), "tailscope.prefill.recompute": True}
            span = add("prefill", max(c.start_ns, cursor), min(c.end_ns, decode.end_ns), attrs, under=decode.span_id)
            cursor = span.end_ns
    add("stream end", hi, hi, {"tailscope.finish_reason": t.finish_reason or "abort"}, error=t.aborted)
    return out


def _chunk_attributes(k: int, c: PrefillChunk) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tailscope.prefill.chunk": k,
        "tailscope.prefill.chunk_tokens": c.tokens,
        "tailscope.prefill.computed_tokens": c.computed,
        "tailscope.step.prefill_tokens": c.step_prefill_tokens,
        "tailscope.step.decode_seqs": c.step_decode_seqs,
    }
    if c.pool:
        out["tailscope.pool"] = c.pool
    return out


def request_spans(
    timings: list[RequestTiming], *, model: str, span_ids: random.Random, phases: bool = True
) -> list[OtlpSpan]:
    """Per timing its ``llm_request`` span and, with ``phases``, its :func:`phase_spans` after it."""
    out: list[OtlpSpan] = []
    for t in timings:
        parent = _request_span(t, model, span_ids)
        out.append(parent)
        if phases:
            out.extend(phase_spans(t, parent, model=model, span_ids=span_ids))
    return out


def encode_spans(
    timings: list[RequestTiming], *, model: str, service: str, span_ids: random.Random, phases: bool = False
) -> bytes:
    """An OTLP ``ExportTraceServiceRequest`` (protobuf bytes) with one ``llm_request`` span per timing (and, with
    ``phases``, its phase spans)."""
    spans = request_spans(timings, model=model, span_ids=span_ids, phases=phases)
    return encode(spans, service=service, scope=SCOPE)


class SpanExporter:
    """Batches request timings and POSTs them as OTLP/HTTP protobuf from a background task (the shared
    :class:`~tailscope.client.otlp.OtlpSender`).

    Args:
        endpoint: the collector (``http://HOST:4318`` or a full ``…/v1/traces`` URL).
        model: the served model name (``gen_ai.response.model``).
        service: the ``service.name`` resource attribute.
        interval_s: how often pending spans are sent.
        max_batch: send at once when this many spans wait.
        seed: seed of span ids and of the trace ids of requests that came without a ``traceparent``.
        spans: ``phases`` (default): the ``llm_request`` span and its phase spans; ``request``: that span alone.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        model: str,
        service: str = "tailscope-serve",
        interval_s: float = 0.5,
        max_batch: int = 512,
        seed: int | None = None,
        spans: str = "phases",
    ) -> None:
        self.model = model
        self.phases = spans == "phases"
        self._ids = random.Random(seed)
        self.sender: OtlpSender[RequestTiming] = OtlpSender(
            endpoint,
            lambda batch: request_spans(batch, model=model, span_ids=self._ids, phases=self.phases),
            service=service,
            scope=SCOPE,
            interval_s=interval_s,
            max_batch=max_batch,
        )
        self.url = self.sender.url
        # Unix ns = clock ns + offset: one reading at start maps every monotonic stamp (no wall-clock read per span)
        self.unix_offset_ns = 0

    @property
    def exported(self) -> int:
        return self.sender.exported

    @property
    def dropped(self) -> int:
        return self.sender.dropped

    @property
    def last_error(self) -> str | None:
        return self.sender.last_error

    def new_trace_id(self) -> str:
        """A trace id for a request that came without trace context."""
        return f"{self._ids.getrandbits(128) | 1:032x}"

    def start(self, clock: Clock) -> None:
        """Start the sender on the running loop, mapping the serving ``clock`` to Unix time."""
        self.unix_offset_ns = unix_offset_ns(clock)
        self.sender.start()

    def add(self, timing: RequestTiming) -> None:
        """Queue one request's span (the hot path: an append)."""
        self.sender.add(timing)

    async def stop(self) -> None:
        """Send what is pending and stop."""
        await self.sender.stop()
