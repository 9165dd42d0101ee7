"""RequestRecords of simulated requests: the same results model as bench (``tokens_source = engine``)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tailscope.errors import InternalError
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.spec import RequestSpec

# A simulation builds one RequestRecord per request, and the frozen dataclass's generated ``__init__`` (one
# ``object.__setattr__`` per field, looked up each time) is a good part of the per-request cost. ``record_ok``
# fills the slots directly through the slot descriptors' setters: the same object ``RequestRecord(...)`` builds
# (a test compares the two) at about half the cost. Should RequestRecord gain a field, the constructor is used.
_FIELDS = tuple(f.name for f in fields(RequestRecord))
_EXPECTED = (
    "id",
    "scheduled_ns",
    "sent_ns",
    "first_token_ns",
    "end_ns",
    "status",
    "request_class",
    "session_id",
    "turn",
    "input_tokens",
    "output_tokens",
    "requested_output_tokens",
    "tokens_source",
    "error",
    "error_detail",
    "http_status",
    "server_request_id",
    "chunk_times_ns",
    "chunk_tokens",
    "warmup",
    "shared_prefix",
    "stream_end_ns",
    "first_event_ns",
    "worker",
    "trace_id",
    "span_id",
)
_FAST = set(_FIELDS) == set(_EXPECTED)


def _setter(name: str) -> Any:
    return getattr(RequestRecord, name).__set__ if _FAST else None


_NEW = object.__new__
_S_ID = _setter("id")
_S_SCHEDULED = _setter("scheduled_ns")
_S_SENT = _setter("sent_ns")
_S_FIRST = _setter("first_token_ns")
_S_END = _setter("end_ns")
_S_STATUS = _setter("status")
_S_CLASS = _setter("request_class")
_S_SESSION = _setter("session_id")
_S_TURN = _setter("turn")
_S_INPUT = _setter("input_tokens")
_S_OUTPUT = _setter("output_tokens")
_S_REQUESTED = _setter("requested_output_tokens")
_S_SOURCE = _setter("tokens_source")
_S_ERROR = _setter("error")
_S_DETAIL = _setter("error_detail")
_S_HTTP = _setter("http_status")
_S_SERVER_ID = _setter("server_request_id")
_S_TIMES = _setter("chunk_times_ns")
_S_TOKENS = _setter("chunk_tokens")
_S_WARMUP = _setter("warmup")
_S_SHARED = _setter("shared_prefix")
_S_STREAM_END = _setter("stream_end_ns")
_S_FIRST_EVENT = _setter("first_event_ns")
_S_WORKER = _setter("worker")
_S_TRACE = _setter("trace_id")
_S_SPAN = _setter("span_id")
_OK = Status.OK
_ENGINE = TokensSource.ENGINE

#: ``(1,) * n`` shared per length: every simulated chunk carries one token (bounded by the longest output)
_ONES: dict[int, tuple[int, ...]] = {}


def ones(n: int) -> tuple[int, ...]:
    """The tuple ``(1,) * n`` (one shared object per length; tuples are immutable)."""
    t = _ONES.get(n)
    if t is None:
        t = _ONES[n] = (1,) * n
    return t


def record_ok(
    spec: RequestSpec,
    scheduled_ns: int,
    prompt: int,
    replica: int,
    times: tuple[int, ...],
    sent_ns: int | None = None,
) -> RequestRecord:
    """A successful request: one chunk per emitted token at its step's end time; sent at ``sent_ns`` (default: as
    scheduled).

    Raises:
        InternalError: no token times (issue 24: a session turn once completed with its times trimmed away, an
            IndexError here); named, so the report carries the request, session and turn.
    """
    if not times:
        raise InternalError(
            f"simulated request {spec.id} (session {spec.session_id}, turn {spec.turn}) completed with no token "
            "times: a simulator bug; please report it with the profile and --seed"
        )
    first, last, n = times[0], times[-1], len(times)
    sent = scheduled_ns if sent_ns is None else sent_ns
    toks = _ONES.get(n) or ones(n)
    if not _FAST:
        return RequestRecord(
            id=spec.id,
            scheduled_ns=scheduled_ns,
            sent_ns=sent,
            first_token_ns=first,
            end_ns=last,
            status=Status.OK,
            request_class=spec.request_class,
            session_id=spec.session_id,
            turn=spec.turn,
            input_tokens=prompt,
            output_tokens=n,
            requested_output_tokens=spec.output_tokens,
            tokens_source=TokensSource.ENGINE,
            chunk_times_ns=times,
            chunk_tokens=toks,
            warmup=spec.warmup,
            shared_prefix=spec.prefix_id is not None,
            stream_end_ns=last,
            first_event_ns=first,
            worker=replica,
            step=spec.step,
            depends_on=_depends_on(spec),
        )
    r = _NEW(RequestRecord)
    _S_ID(r, spec.id)
    _S_SCHEDULED(r, scheduled_ns)
    _S_SENT(r, sent)
    _S_FIRST(r, first)
    _S_END(r, last)
    _S_STATUS(r, _OK)
    _S_CLASS(r, spec.request_class)
    _S_SESSION(r, spec.session_id)
    _S_TURN(r, spec.turn)
    _S_INPUT(r, prompt)
    _S_OUTPUT(r, n)
    _S_REQUESTED(r, spec.output_tokens)
    _S_SOURCE(r, _ENGINE)
    _S_ERROR(r, None)
    _S_DETAIL(r, None)
    _S_HTTP(r, None)
    _S_SERVER_ID(r, None)
    _S_TIMES(r, times)
    _S_TOKENS(r, toks)
    _S_WARMUP(r, spec.warmup)
    _S_SHARED(r, spec.prefix_id is not None)
    _S_STREAM_END(r, last)
    _S_FIRST_EVENT(r, first)
    _S_WORKER(r, replica)
    _S_TRACE(r, None)
    _S_SPAN(r, None)
    return r


def record_error(
    spec: RequestSpec,
    scheduled_ns: int,
    prompt: int,
    replica: int,
    now: int,
    detail: str,
    *,
    incomplete: bool = False,
    sent_ns: int | None = None,
) -> RequestRecord:
    """A request the engine refused (too long for its KV cache) or one still in flight at the horizon."""
    return RequestRecord(
        id=spec.id,
        scheduled_ns=scheduled_ns,
        sent_ns=scheduled_ns if sent_ns is None else sent_ns,
        first_token_ns=None,
        end_ns=now,
        status=Status.INCOMPLETE if incomplete else Status.ERROR,
        request_class=spec.request_class,
        session_id=spec.session_id,
        turn=spec.turn,
        input_tokens=prompt,
        output_tokens=0,
        requested_output_tokens=spec.output_tokens,
        tokens_source=TokensSource.ENGINE,
        error=None if incomplete else ErrorClass.HTTP_4XX,
        error_detail=detail,
        http_status=None if incomplete else 400,
        warmup=spec.warmup,
        shared_prefix=spec.prefix_id is not None,
        worker=max(replica, 0),
        step=spec.step,
        depends_on=_depends_on(spec),
    )


def _depends_on(spec: RequestSpec) -> tuple[int, ...]:
    """The ids of the calls a call-graph request waited for (empty for any other)."""
    return tuple(d for d, _ in spec.after) if spec.after else ()
