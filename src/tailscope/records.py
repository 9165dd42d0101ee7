"""The one results model: frozen, slotted records shared by bench, sim and trace.

Times inside a run are integer nanoseconds relative to the run's start (``t0``, a monotonic reading taken when the run
began); ``Run.started_at`` is the single wall-clock stamp. A failed request is a record with ``status != "ok"`` and an
``error`` class, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tailscope.record_ops import record_dict


class RunKind(StrEnum):
    """What produced a run's records."""

    BENCH = "bench"
    SIM = "sim"
    TRACE = "trace"
    IMPORT = "import"  # another tool's result file (`tailscope runs import`)


class RunStatus(StrEnum):
    """Lifecycle of a run. ``incomplete`` = interrupted or crashed; ``degraded`` = a worker was lost."""

    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    DEGRADED = "degraded"


class Status(StrEnum):
    """Outcome of one request."""

    OK = "ok"
    ERROR = "error"
    INCOMPLETE = "incomplete"  # still in flight when the run stopped


class ErrorClass(StrEnum):
    """Why a request failed. Documented in docs/metrics.md."""

    CONNECT = "connect"
    HTTP_4XX = "http_4xx"
    HTTP_401 = "http_401"
    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"
    TIMEOUT_TOTAL = "timeout_total"
    STREAM_BROKEN = "stream_broken"
    MALFORMED_SSE = "malformed_sse"
    SERVER_ERROR_EVENT = "server_error_event"
    EMPTY_RESPONSE = "empty_response"
    CANCELLED = "cancelled"
    OTHER = "other"


class TokensSource(StrEnum):
    """Where a record's output token counts came from."""

    USAGE = "usage"  # server usage (per chunk when streamed per chunk, else final usage)
    TOKENIZER = "tokenizer"  # local tokenizer over the streamed text
    CHUNKS = "chunks"  # one token per content-bearing chunk (approximation)
    ENGINE = "engine"  # exact counts from the simulated engine


@dataclass(frozen=True, slots=True)
class Target:
    """What was measured."""

    url: str
    model: str
    endpoint: str = "chat"  # chat | completions
    builtin: bool = False  # True when the target is tailscope's own simulated engine
    description: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """One measurement (a bench run, a simulation, an ingested trace set, or another tool's imported result).

    ``probe`` names what made a run that only serves another command (``calibrate``, ``find-max``,
    ``twin-check``): such runs are tagged ``probe`` and never resolve as ``latest``. None for a measurement.
    """

    id: str
    kind: RunKind
    tool_version: str
    started_at: str  # ISO 8601 UTC wall clock
    target: Target
    seed: int
    settings: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    status: RunStatus = RunStatus.RUNNING
    sweep_id: str | None = None
    host: dict[str, Any] = field(default_factory=dict)
    probe: str | None = None


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client (or the simulator) saw it.

    All ``*_ns`` times are nanoseconds since the run start. ``scheduled_ns`` is the intended send time (open loop) or
    the moment the closed-loop slot became free; headline latencies are measured from it, so a late client cannot hide
    server delay (no coordinated omission).

    Attributes:
        chunk_times_ns: arrival time of every token-bearing event (content or reasoning content).
        chunk_tokens: tokens carried by each of those events (same length as ``chunk_times_ns``).
        first_token_ns: arrival of the first token-bearing event, or None when none arrived.
        end_ns: arrival of the last token-bearing event for successful requests; for failed requests, when the
            failure was observed.
        stream_end_ns: when the stream closed (``[DONE]`` or connection end); dialects that end E2E there use it.
        first_event_ns: arrival of the first SSE event of any kind (role-only deltas included).
        trace_id: the W3C trace id sent in the request's ``traceparent`` (``bench --trace-context``), else None.
        span_id: the client span id of that ``traceparent`` (the parent of the server's root span), else None.
        first_answer_ns: arrival of the first answer token (``delta.content``), None when none came; a reasoning
            model's ``reasoning_content``/``reasoning`` deltas come before it (then ``first_token_ns`` is the first
            reasoning token).
        reasoning_tokens: output tokens that were reasoning (the server's ``completion_tokens_details`` when it
            reports them, else the reasoning events' token counts); None when the stream carried no reasoning.
        cached_tokens: prompt tokens the server served from its prefix cache
            (``usage.prompt_tokens_details.cached_tokens``); None when the server does not say.
        connection_reused: True when the request went out on a kept-alive connection, False when a new one was
            opened for it; None when none was obtained.
        dns_ns / connect_ns / tls_ns: durations (ns) of resolving the host, the TCP connect and the TLS handshake
            of the connection opened for this request; None when it was reused (``tls_ns`` also for plain HTTP, and
            with ``--http-client aiohttp``, whose connect includes the handshake).
        step: an agent session's step name (the call-graph node, ``research/search`` for a sub-agent's step), else
            None. ``turn`` is then the call's index in its session (dispatch order).
        depends_on: ids of the requests of the same session this call waited for (an agent's join, trace → load's
            dependencies): it was due its tool gap after the latest of their ends. Empty for a session's first calls
            and for requests outside a call graph.
        session_calls: the calls its agent session was drawn with (on every call of the session), else None: a
            session rebuilt from stored records (a killed run) with fewer calls than this was cut, not complete.
    """

    id: int
    scheduled_ns: int
    sent_ns: int | None
    first_token_ns: int | None
    end_ns: int | None
    status: Status
    request_class: str = "default"
    session_id: str | None = None
    turn: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    requested_output_tokens: int | None = None
    tokens_source: TokensSource = TokensSource.CHUNKS
    error: ErrorClass | None = None
    error_detail: str | None = None
    http_status: int | None = None
    server_request_id: str | None = None
    chunk_times_ns: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    warmup: bool = False
    shared_prefix: bool = False
    stream_end_ns: int | None = None
    first_event_ns: int | None = None
    worker: int = 0
    trace_id: str | None = None
    span_id: str | None = None
    first_answer_ns: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    connection_reused: bool | None = None
    dns_ns: int | None = None
    connect_ns: int | None = None
    tls_ns: int | None = None
    step: str | None = None
    depends_on: tuple[int, ...] = ()
    session_calls: int | None = None

    @property
    def ok(self) -> bool:
        """True for a successful request."""
        return self.status is Status.OK

    @property
    def closed_ns(self) -> int | None:
        """When the response ended as the stream saw it: ``stream_end_ns``, else ``end_ns`` (None: neither)."""
        return self.stream_end_ns if self.stream_end_ns is not None else self.end_ns


@dataclass(frozen=True, slots=True)
class ServerSample:
    """One scraped value of a server metric at ``t_ns`` since run start."""

    t_ns: int
    name: str
    value: float
    labels: str = ""  # canonical ``k="v",…`` text, "" when unlabelled


@dataclass(frozen=True, slots=True)
class Span:
    """One trace span, normalised to nanoseconds since the Unix epoch."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    service: str = ""
    kind: str = "INTERNAL"
    status: str = "UNSET"
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    layer: str = "other"
    follows_from: bool = False

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """How many requests ended which way. ``total`` excludes warmup requests; ``warmup`` counts them."""

    total: int
    completed: int
    failed: int
    incomplete: int
    warmup: int

    def to_dict(self) -> dict[str, int]:
        return record_dict(self)
