"""Synthetic agent traces with known waterfalls, for trying ``tailscope trace`` and for benchmarks.

Each trace is a chat request through a gateway into an agent: a planning model call, three tool calls (a knowledge
base search backed by a vector store, an order lookup backed by Postgres, a user lookup over HTTP), and an answering
model call that is sometimes retried after an error. In a fraction ``sequential_share`` of the traces the tools run one
after another (the waterfall ``invoke_agent support → execute_tool search_kb, execute_tool get_order,
execute_tool get_user``); otherwise they run concurrently. Randomness comes from the injected generator.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from tailscope.records import Span
from tailscope.trace.layers import classify

MS = 1_000_000


class _Builder:
    def __init__(self, rng: random.Random, trace_id: str) -> None:
        self.rng = rng
        self.trace_id = trace_id
        self.spans: list[Span] = []
        self._n = 0

    def span(
        self,
        parent: str | None,
        name: str,
        start: int,
        dur: int,
        *,
        service: str,
        kind: str = "INTERNAL",
        status: str = "UNSET",
        **attrs: Any,
    ) -> str:
        self._n += 1
        sid = f"{self._n:016x}"
        attributes = {k.replace("__", "."): v for k, v in attrs.items()}
        self.spans.append(
            Span(
                trace_id=self.trace_id,
                span_id=sid,
                parent_id=parent,
                name=name,
                start_ns=start,
                end_ns=start + dur,
                service=service,
                kind=kind,
                status=status,
                attributes=attributes,
                layer=classify(name, kind, attributes, service=service),
            )
        )
        return sid

    def ms(self, median: float, sigma: float = 0.35) -> int:
        return max(1, int(self.rng.lognormvariate(0.0, sigma) * median * MS))


def _tool(b: _Builder, parent: str, name: str, start: int, scale: float, extra: int) -> int:
    """One tool call with its backend call(s); returns its end time."""
    t = start + b.ms(0.3)
    tool = b.span(parent, f"execute_tool {name}", start, 0, service="agent", gen_ai__operation__name="execute_tool")
    if name == "search_kb":
        d = b.ms(180 * scale)
        b.span(tool, "qdrant search", t, d, service="agent", kind="CLIENT", db__system__name="qdrant")
    elif name == "get_order":
        d = b.ms(120 * scale)
        b.span(tool, "SELECT orders", t, d, service="agent", kind="CLIENT", db__system__name="postgresql",
               db__query__text="SELECT * FROM orders WHERE user_id = $1")  # fmt: skip
    else:
        d = b.ms(90 * scale)
        c = b.span(tool, "GET /users/{id}", t, d, service="agent", kind="CLIENT", http__request__method="GET",
                   url__full="http://users.internal/users/42")  # fmt: skip
        srv = d - b.ms(4)
        b.span(c, "GET /users/{id}", t + (d - max(srv, 1)) // 2, max(srv, 1), service="users", kind="SERVER",
               http__route="/users/{id}")  # fmt: skip
    t += d
    for k in range(extra):
        d2 = b.ms(5)
        b.span(tool, f"cache get {k}", t, d2, service="agent", kind="CLIENT", db__system__name="redis")
        t += d2
    end = t + b.ms(0.3)
    # Fix the tool span's end now that its children are known (spans are immutable: rebuild it).
    idx = next(i for i, s in enumerate(b.spans) if s.span_id == tool)
    s = b.spans[idx]
    b.spans[idx] = Span(s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, end, s.service, s.kind, s.status,
                        s.attributes, s.links, s.layer, s.follows_from)  # fmt: skip
    return end


def demo_trace(
    rng: random.Random,
    trace_id: str,
    start_ns: int,
    *,
    sequential_share: float = 0.63,
    tool_scale: float = 1.0,
    extra_calls: int = 0,
    retry_rate: float = 0.08,
) -> list[Span]:
    """One synthetic agent trace.

    Args:
        rng: the random source.
        trace_id: 32 hex digits.
        start_ns: the root's start (ns since the epoch).
        sequential_share: probability that the three tool calls run one after another.
        tool_scale: multiplies the tools' backend latencies.
        extra_calls: cache calls added to each tool (more spans per trace, for benchmarks).
        retry_rate: probability that the answering model call fails once and is retried.
    """
    b = _Builder(rng, trace_id)
    t = start_ns
    root = b.span(None, "POST /chat", t, 0, service="gateway", kind="SERVER", http__request__method="POST",
                  http__route="/chat")  # fmt: skip
    t += b.ms(2)
    agent = b.span(root, "invoke_agent support", t, 0, service="agent", gen_ai__operation__name="invoke_agent",
                   gen_ai__agent__name="support")  # fmt: skip
    agent_start = t
    t += b.ms(1)
    d = b.ms(350)
    b.span(agent, "chat gpt-4o-mini", t, d, service="agent", kind="CLIENT", gen_ai__operation__name="chat",
           gen_ai__request__model="gpt-4o-mini", gen_ai__usage__input_tokens=900)  # fmt: skip
    t += d + b.ms(1)
    tools = ("search_kb", "get_order", "get_user")
    if rng.random() < sequential_share:
        for name in tools:
            t = _tool(b, agent, name, t, tool_scale, extra_calls) + b.ms(0.5)
    else:
        t = max(_tool(b, agent, name, t + b.ms(0.2), tool_scale, extra_calls) for name in tools) + b.ms(0.5)
    if rng.random() < retry_rate:
        d = b.ms(200)
        b.span(agent, "chat gpt-4o-mini", t, d, service="agent", kind="CLIENT", status="ERROR",
               gen_ai__operation__name="chat", gen_ai__request__model="gpt-4o-mini")  # fmt: skip
        t += d + b.ms(50)
    d = b.ms(600)
    b.span(agent, "chat gpt-4o-mini", t, d, service="agent", kind="CLIENT", gen_ai__operation__name="chat",
           gen_ai__request__model="gpt-4o-mini", gen_ai__usage__output_tokens=250)  # fmt: skip
    t += d + b.ms(1)
    out = []
    for s in b.spans:
        if s.span_id in (root, agent):
            end = t + (b.ms(1) if s.span_id == root else 0)
            s = Span(s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns if s.span_id == root else agent_start, end,
                     s.service, s.kind, s.status, s.attributes, s.links, s.layer, s.follows_from)  # fmt: skip
        out.append(s)
    return out


def demo_traces(
    n: int, *, seed: int = 7, start_ns: int = 1_767_225_600_000_000_000, **kwargs: Any
) -> Iterator[list[Span]]:
    """``n`` synthetic traces (see :func:`demo_trace` for the keyword arguments), one every 50 ms."""
    rng = random.Random(seed)
    for k in range(n):
        trace_id = f"{rng.getrandbits(128):032x}"
        yield demo_trace(rng, trace_id, start_ns + k * 50 * MS, **kwargs)


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


_KIND_INT = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS_INT = {"UNSET": 0, "OK": 1, "ERROR": 2}


def to_otlp_json(spans: list[Span]) -> dict[str, Any]:
    """Spans as one OTLP/JSON ``ExportTraceServiceRequest`` (one resource per service)."""
    by_service: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_service.setdefault(s.service, []).append(
            {
                "traceId": s.trace_id,
                "spanId": s.span_id,
                **({"parentSpanId": s.parent_id} if s.parent_id else {}),
                "name": s.name,
                "kind": _KIND_INT.get(s.kind, 1),
                "startTimeUnixNano": str(s.start_ns),
                "endTimeUnixNano": str(s.end_ns),
                "attributes": [{"key": k, "value": _value(v)} for k, v in s.attributes.items()],
                "status": {"code": _STATUS_INT.get(s.status, 0)},
            }
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": svc}}]},
                "scopeSpans": [{"scope": {"name": "tailscope.demo"}, "spans": rows}],
            }
            for svc, rows in by_service.items()
        ]
    }
