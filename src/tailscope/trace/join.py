"""The client and the tree joined: each request's client-seen TTFT and E2E taken apart, by trace id.

Pure: bench records (:class:`~tailscope.records.RequestRecord`, with the ``trace_id``/``span_id`` that
``bench --trace-context`` sent) and the spans of their traces in, parts out; no IO. Every part is in integer
nanoseconds and the parts of a request add up exactly to its client-seen figure (docs/metrics.md, "Client and tree"):

``client``
    send lag: ``sent − scheduled`` (the load generator's own lateness).
``network``
    the client's window (sent → first token, or sent → last token for E2E) minus the server's (its root span's start
    → the engine's first token, or → the root span's end): both directions of the wire, connection set-up and
    everything outside the server's spans. Differences of durations, so the hosts' clocks need not agree.
``connection``
    of that, opening the connection the request went out on (the record's ``dns_ns + connect_ns + tls_ns``, when
    the raw transport opened one for it; at most the network part, whose remainder is the wire's).
``gateway``, ``retrieval``, ``agent``, ``business``, ``other``, ``network_internal`` (CLIENT-span time inside the
tree), ``inference``
    the server's critical path from its root span's start up to the first token (TTFT) or to its end (E2E), by the
    layer of the span that owns each instant; the engine's span is split further:
``queue``, ``prefill``, ``decode``
    from the engine span's attributes (vLLM's ``gen_ai.latency.time_in_queue``, ``…time_in_model_prefill``,
    ``…time_in_model_decode``, placed back from ``…time_to_first_token``; spans below it are split by the same
    figures), or, for an engine that reports its phases as child spans, inference-layer spans named like them
    (``queue``/``waiting``/``schedul…``, ``prefill``, ``decode``);
``frontend``
    what is left of the engine's span: its API server (receiving, tokenizing, handing to the engine core,
    detokenizing, the stream's end).
``unexplained``
    time that no span accounts for: a request whose trace has no first-token time gets its whole server window here.

Never negative: when the server's window is longer than the client's (impossible on one clock), clock skew or
inaccurate spans are suspected, ``network`` is 0 and the server's parts are scaled down to the client's window.
With the run start's Unix time known (``t0_unix_ns``), the client's send and first token must bracket the server's
root span and first token; when they do not (beyond ``skew_tolerance_ns``), skew is suspected too, and when they do,
the network time is also split by direction (``network_request_ns`` / ``network_response_ns``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.metrics.percentiles import compute_stats, quantile
from tailscope.records import RequestRecord, Span

#: the parts in display order
PARTS: tuple[str, ...] = (
    "client",
    "network",
    "connection",
    "gateway",
    "retrieval",
    "agent",
    "business",
    "network_internal",
    "other",
    "inference",
    "frontend",
    "queue",
    "prefill",
    "decode",
    "unexplained",
)
_LAYER_PART = {"network": "network_internal"}
#: phase spans of an engine that reports them as children (inference-layer spans named so)
_PREFILL_NAME = re.compile(r"(?i)prefill")
_PHASE_NAME = re.compile(r"(?i)(?P<queue>queue|waiting|schedul)|(?P<prefill>prefill)|(?P<decode>decode)")
TTFT_KEY = "gen_ai.latency.time_to_first_token"
QUEUE_KEY = "gen_ai.latency.time_in_queue"
PREFILL_KEY = "gen_ai.latency.time_in_model_prefill"
DECODE_KEY = "gen_ai.latency.time_in_model_decode"

#: why a request was not joined
NOT_TRACED = "not traced (no trace id: sent without --trace-context or not sampled)"
WARMUP = "warmup request"
NO_FIRST_TOKEN = "no first token (failed or incomplete request)"
NO_SPANS = "no span of its trace in the set"


@dataclass(frozen=True, slots=True)
class RequestParts:
    """One joined request's client-seen latencies and their parts (ns; each dict sums exactly to its total).

    Attributes:
        request_id, trace_id: the record and its trace.
        ttft_ns / ttft_parts_ns: client TTFT (from the scheduled send time) and its parts.
        e2e_ns / e2e_parts_ns: client E2E and its parts; None / {} for a request without a last token.
        skew_suspected: the server's spans do not fit inside the client's view of the request.
        network_request_ns / network_response_ns: the network part by direction (TTFT: client send → server root
            start, server first token → client first token), when the run start's Unix time is known and the clocks
            agree; else None.
        notes: what could not be taken apart, and why.
    """

    request_id: int
    trace_id: str
    ttft_ns: int
    ttft_parts_ns: dict[str, int]
    e2e_ns: int | None
    e2e_parts_ns: dict[str, int]
    skew_suspected: bool = False
    network_request_ns: int | None = None
    network_response_ns: int | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``per_request`` row of ``trace join --json`` (milliseconds)."""
        return {
            "request_id": self.request_id,
            "trace_id": self.trace_id,
            "ttft_ms": self.ttft_ns / 1e6,
            "ttft_parts_ms": {k: v / 1e6 for k, v in self.ttft_parts_ns.items()},
            "e2e_ms": None if self.e2e_ns is None else self.e2e_ns / 1e6,
            "e2e_parts_ms": {k: v / 1e6 for k, v in self.e2e_parts_ns.items()},
            "skew_suspected": self.skew_suspected,
            "network_request_ms": None if self.network_request_ns is None else self.network_request_ns / 1e6,
            "network_response_ms": None if self.network_response_ns is None else self.network_response_ns / 1e6,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class JoinSummary:
    """The join of one run with one trace set.

    Attributes:
        requests: the run's requests (warmup excluded).
        joined: requests taken apart.
        unjoined: reason → count; ``unjoined_ids`` lists ``(request id, reason)``.
        per_request: the joined requests' parts.
        ttft_ms / e2e_ms: per part, its distribution over the joined requests (``Stats.to_dict()`` in ms) and
            ``share_slow``: its share of the summed client figure over the slow requests (≥ the p95).
        explain_ttft_p99 / explain_e2e_p99: the mean parts of the requests at or above the client-seen p99, largest
            first, with their shares.
        skew_suspected: how many joined requests look clock-skewed.
    """

    requests: int
    joined: int
    unjoined: dict[str, int]
    unjoined_ids: tuple[tuple[int, str], ...]
    per_request: tuple[RequestParts, ...]
    ttft_ms: dict[str, dict[str, Any]]
    e2e_ms: dict[str, dict[str, Any]]
    explain_ttft_p99: dict[str, Any]
    explain_e2e_p99: dict[str, Any]
    skew_suspected: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "joined": self.joined,
            "unjoined": dict(self.unjoined),
            "unjoined_requests": [{"request_id": i, "reason": r} for i, r in self.unjoined_ids],
            "skew_suspected": self.skew_suspected,
            "ttft_ms": self.ttft_ms,
            "e2e_ms": self.e2e_ms,
            "explain_ttft_p99": self.explain_ttft_p99,
            "explain_e2e_p99": self.explain_e2e_p99,
            "per_request": [p.to_dict() for p in self.per_request],
            **self.extra,
        }


# ---- the server's window: a critical path clipped to [lo, hi] ------------------------------------------------------


def _children(spans: Sequence[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for s in spans:
        if s.parent_id is not None:
            out.setdefault(s.parent_id, []).append(s)
    return out


def window_path(root: Span, kids: Mapping[str, Sequence[Span]], lo: int, hi: int) -> list[tuple[Span, int, int]]:
    """Who owns each instant of ``[lo, hi)``: ``(span, start, end)`` pieces that tile it exactly (no overlap, no gap).

    Walks back from ``hi``: the child that ends last at or before the cursor (clipped to the window and to its
    parent) owns its interval, recursively; the parent owns the gaps. Parallel children: the later-ending one is on
    the path. Iterative, so deep trees do not recurse.
    """
    out: list[tuple[Span, int, int]] = []
    stack: list[tuple[Span, int, int]] = [(root, lo, hi)]
    while stack:
        span, a, b = stack.pop()
        if b <= a:
            continue
        cursor = b
        cands = [
            (c, max(c.start_ns, a), min(c.end_ns, b))
            for c in kids.get(span.span_id, ())
            if c.span_id != span.span_id and min(c.end_ns, b) > max(c.start_ns, a)
        ]
        while cursor > a:
            best: tuple[Span, int, int] | None = None
            for c, cs, ce in cands:
                if cs >= cursor:
                    continue
                e = min(ce, cursor)
                if best is None or e > best[2] or (e == best[2] and cs < best[1]):
                    best = (c, cs, e)
            if best is None:
                out.append((span, a, cursor))
                break
            c, cs, e = best
            if e < cursor:
                out.append((span, e, cursor))
            stack.append((c, cs, e))
            cursor = cs
    return out


def _attr_ns(span: Span, key: str) -> int | None:
    """A latency attribute in seconds (number or numeric text) as ns; None when absent, negative or not a number."""
    v = span.attributes.get(key)
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return round(x * 1e9) if 0 <= x < 1e7 else None


def engine_intervals(span: Span) -> dict[str, tuple[int, int]]:
    """The engine's own phases inside its span, from vLLM-style attributes: queue, prefill, decode (absolute ns)."""
    ttft = _attr_ns(span, TTFT_KEY)
    if ttft is None:
        return {}
    first = span.start_ns + ttft
    out: dict[str, tuple[int, int]] = {}
    prefill = _attr_ns(span, PREFILL_KEY)
    if prefill is not None:
        out["prefill"] = (first - prefill, first)
        queue = _attr_ns(span, QUEUE_KEY)
        if queue is not None:
            out["queue"] = (first - prefill - queue, first - prefill)
    decode = _attr_ns(span, DECODE_KEY)
    if decode is not None:
        out["decode"] = (first, first + decode)
    return out


def _split(parts: dict[str, int], a: int, b: int, phases: Mapping[str, tuple[int, int]], rest: str) -> None:
    covered = 0
    for name, (x, y) in phases.items():
        n = min(b, y) - max(a, x)
        if n > 0:
            parts[name] = parts.get(name, 0) + n
            covered += n
    if b - a - covered > 0:
        parts[rest] = parts.get(rest, 0) + (b - a - covered)


def server_parts(
    root: Span, kids: Mapping[str, Sequence[Span]], lo: int, hi: int, engines: Mapping[str, dict[str, tuple[int, int]]]
) -> dict[str, int]:
    """The parts of the server's window ``[lo, hi)`` (they sum to ``hi − lo``)."""
    parts: dict[str, int] = {}
    for span, a, b in window_path(root, kids, lo, hi):
        phases = engines.get(span.span_id)
        if phases:
            _split(parts, a, b, phases, "frontend")
            continue
        part = _LAYER_PART.get(span.layer, span.layer if span.layer in PARTS else "other")
        if span.layer == "inference":  # an engine that reports its phases as child spans (by name)
            m = _PHASE_NAME.search(span.name)
            if m is not None:
                part = next(k for k, v in m.groupdict().items() if v is not None)
        parts[part] = parts.get(part, 0) + (b - a)
    return parts


def inherit_phases(
    tree: Sequence[Span], kids: Mapping[str, Sequence[Span]], engines: dict[str, dict[str, tuple[int, int]]]
) -> dict[str, dict[str, tuple[int, int]]]:
    """``engines`` extended to every span below an engine span (its children are split by the engine's figures)."""
    out = dict(engines)
    stack = [s for s in tree if s.span_id in engines]
    while stack:
        s = stack.pop()
        for c in kids.get(s.span_id, ()):
            if c.span_id not in out:
                out[c.span_id] = out[s.span_id]
                stack.append(c)
    return out


def fit(parts: Mapping[str, int], total: int) -> dict[str, int]:
    """``parts`` scaled down to sum exactly to ``total`` (largest remainders get the leftover nanoseconds)."""
    s = sum(parts.values())
    if s <= total or s == 0:
        return dict(parts)
    scaled = {k: v * total // s for k, v in parts.items()}
    left = total - sum(scaled.values())
    for k in sorted(parts, key=lambda k: (-(parts[k] * total % s), k))[:left]:
        scaled[k] += 1
    return scaled


def _window_parts(client: int, window: int, inner: Mapping[str, int], server: int) -> tuple[dict[str, int], bool]:
    """A client-seen latency's parts: ``client`` (scheduled to sent), ``network`` (the ``window`` from the send less
    the ``server``'s part, ns) and the server's ``inner`` parts; True when the server's part is longer than the window
    (clocks disagree: the server's parts are fitted into the window and the network gets 0)."""
    over = server > window
    if over:
        inner = fit(inner, window)
        server = window
    parts = {"client": client, "network": window - server, **inner}
    parts.setdefault("unexplained", 0)
    return parts, over


def _root(spans: Sequence[Span], client_span: str | None) -> Span | None:
    if client_span is not None:  # the client's own span (bench --otlp-endpoint) is the request, not the server's root
        spans = [s for s in spans if s.span_id != client_span]
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if s.parent_id is None or s.parent_id not in ids]
    if not roots:
        return None
    mine = [s for s in roots if client_span is not None and s.parent_id == client_span]
    return min(mine or roots, key=lambda s: (s.start_ns, s.span_id))


def _subtree(root: Span, kids: Mapping[str, Sequence[Span]]) -> list[Span]:
    out, stack, seen = [], [root], {root.span_id}
    while stack:
        s = stack.pop()
        out.append(s)
        for c in kids.get(s.span_id, ()):
            if c.span_id not in seen:
                seen.add(c.span_id)
                stack.append(c)
    return out


def _ordered(parts: Mapping[str, int]) -> dict[str, int]:
    return {k: parts[k] for k in PARTS if parts.get(k, 0) > 0 or k in ("client", "network", "unexplained")}


def decompose(
    r: RequestRecord, spans: Sequence[Span], *, t0_unix_ns: int | None = None, skew_tolerance_ns: int = 1_000_000
) -> RequestParts | str:
    """One request's parts, or the reason it cannot be joined (one of the module's reason strings)."""
    if r.trace_id is None:
        return NOT_TRACED
    if r.first_token_ns is None or r.sent_ns is None:
        return NO_FIRST_TOKEN
    root = _root(spans, r.span_id)
    if root is None:
        return NO_SPANS
    kids = _children(spans)
    tree = _subtree(root, kids)
    own = {s.span_id: ph for s in tree if (ph := engine_intervals(s))}
    engines = inherit_phases(tree, kids, own)
    firsts = [(s.start_ns + (_attr_ns(s, TTFT_KEY) or 0), s.span_id) for s in tree if s.span_id in own]
    notes: list[str] = []
    start = max(r.sent_ns, r.scheduled_ns)
    client = start - r.scheduled_ns
    ttft = r.first_token_ns - r.scheduled_ns
    skew = False
    server_first = min(firsts)[0] if firsts else None  # the engine's first token (the earliest, if it retried)
    if server_first is None:  # phases as child spans: the first token leaves when the (last) prefill span ends
        prefills = [s.end_ns for s in tree if s.layer == "inference" and _PREFILL_NAME.search(s.name)]
        server_first = max(prefills, default=None)
    # TTFT
    window = r.first_token_ns - start
    if server_first is None or server_first < root.start_ns:
        ttft_parts = {"client": client, "network": 0, "unexplained": window}
        notes.append("no first-token time in the server's spans (gen_ai.latency.time_to_first_token): TTFT not split")
    else:
        inner = server_parts(root, kids, root.start_ns, server_first, engines)
        ttft_parts, over = _window_parts(client, window, inner, server_first - root.start_ns)
        skew |= over
    # E2E
    e2e: int | None = None
    e2e_parts: dict[str, int] = {}
    if r.end_ns is not None and r.ok:
        e2e = r.end_ns - r.scheduled_ns
        ewindow = r.end_ns - start
        inner = server_parts(root, kids, root.start_ns, root.end_ns, engines)
        e2e_parts, over = _window_parts(client, ewindow, inner, root.end_ns - root.start_ns)
        skew |= over
    up = down = None
    opened = (r.dns_ns or 0) + (r.connect_ns or 0) + (r.tls_ns or 0)
    moved = 0
    for parts in (ttft_parts, e2e_parts):  # the connection set-up is inside the client's window, outside the server's
        if opened and parts:
            moved = min(opened, parts.get("network", 0))
            parts["network"] -= moved
            parts["connection"] = moved
    if t0_unix_ns is not None:
        sent_unix = t0_unix_ns + start
        first_unix = t0_unix_ns + r.first_token_ns
        up = root.start_ns - sent_unix
        down = None if server_first is None else first_unix - server_first
        if up < -skew_tolerance_ns or (down is not None and down < -skew_tolerance_ns):
            skew = True
            notes.append("the client's send and first token do not bracket the server's spans: clocks disagree")
        if skew:
            up = down = None
        elif opened:
            up = max(0, up - min(opened, up))  # the request direction without the connection's set-up
    if skew and not notes:
        notes.append("the server's spans last longer than the client saw them: clock skew or inaccurate spans")
    return RequestParts(
        request_id=r.id,
        trace_id=r.trace_id,
        ttft_ns=ttft,
        ttft_parts_ns=_ordered(ttft_parts),
        e2e_ns=e2e,
        e2e_parts_ns=_ordered(e2e_parts) if e2e_parts else {},
        skew_suspected=skew,
        network_request_ns=up,
        network_response_ns=down,
        notes=tuple(notes),
    )


# ---- the set: distributions, slow requests, what explains the P99 ------------------------------------------------


def _distributions(rows: Sequence[tuple[int, dict[str, int]]]) -> dict[str, dict[str, Any]]:
    if not rows:
        return {}
    totals = [t for t, _ in rows]
    p95 = quantile([float(t) for t in totals], 0.95) or 0.0
    slow = [(t, p) for t, p in rows if t >= p95]
    slow_total = sum(t for t, _ in slow) or 1
    names = [k for k in PARTS if any(k in p for _, p in rows)]
    out: dict[str, dict[str, Any]] = {}
    for k in names:
        d = compute_stats([p.get(k, 0) / 1e6 for _, p in rows]).to_dict()
        d["share_slow"] = sum(p.get(k, 0) for _, p in slow) / slow_total
        out[k] = d
    out["total"] = compute_stats([t / 1e6 for t in totals]).to_dict()
    return out


def explain_tail(rows: Sequence[tuple[int, dict[str, int]]], q: float = 0.99) -> dict[str, Any]:
    """The mean parts of the requests at or above the client-seen ``q`` quantile, largest first, with shares."""
    if not rows:
        return {}
    cut = quantile([float(t) for t, _ in rows], q) or 0.0
    tail = [(t, p) for t, p in rows if t >= cut] or [max(rows, key=lambda x: x[0])]
    total = sum(t for t, _ in tail) or 1
    sums: dict[str, int] = {}
    for _, p in tail:
        for k, v in p.items():
            sums[k] = sums.get(k, 0) + v
    ranked = sorted(((k, v) for k, v in sums.items() if v > 0), key=lambda kv: -kv[1])
    return {
        "quantile": q,
        "client_ms": cut / 1e6,
        "requests": len(tail),
        "parts": [{"part": k, "mean_ms": v / len(tail) / 1e6, "share": v / total} for k, v in ranked],
    }


def join_records(
    records: Iterable[RequestRecord],
    traces: Mapping[str, Sequence[Span]],
    *,
    t0_unix_ns: int | None = None,
    skew_tolerance_ns: int = 1_000_000,
) -> JoinSummary:
    """Join ``records`` with the spans of their traces (``traces``: trace id → spans) and summarize the parts.

    Warmup requests are counted apart (reason ``warmup``) and excluded from ``requests``.
    """
    unjoined: dict[str, int] = {}
    ids: list[tuple[int, str]] = []
    joined: list[RequestParts] = []
    n = 0
    for r in records:
        if r.warmup:
            unjoined[WARMUP] = unjoined.get(WARMUP, 0) + 1
            continue
        n += 1
        res = decompose(r, traces.get(r.trace_id or "", ()), t0_unix_ns=t0_unix_ns, skew_tolerance_ns=skew_tolerance_ns)
        if isinstance(res, str):
            unjoined[res] = unjoined.get(res, 0) + 1
            ids.append((r.id, res))
        else:
            joined.append(res)
    ttft_rows = [(p.ttft_ns, p.ttft_parts_ns) for p in joined]
    e2e_rows = [(p.e2e_ns, p.e2e_parts_ns) for p in joined if p.e2e_ns is not None]
    return JoinSummary(
        requests=n,
        joined=len(joined),
        unjoined=unjoined,
        unjoined_ids=tuple(ids),
        per_request=tuple(joined),
        ttft_ms=_distributions(ttft_rows),
        e2e_ms=_distributions(e2e_rows),
        explain_ttft_p99=explain_tail(ttft_rows),
        explain_e2e_p99=explain_tail(e2e_rows),
        skew_suspected=sum(1 for p in joined if p.skew_suspected),
    )
