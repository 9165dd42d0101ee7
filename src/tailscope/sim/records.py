"""RequestRecords of simulated requests: the same results model as bench (``tokens_source = engine``)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.spec import RequestSpec

# A simulation builds one RequestRecord per request, and the frozen dataclass's generated ``__init__`` (one
# ``object.__setattr__`` per field) was a tenth of the whole simulation's CPU time. ``record_ok`` fills the
# slots directly instead: the slot descriptors' setters, in field order, over a template of the field defaults —
# the same object ``RequestRecord(...)`` builds (tests compare the two), at about half the cost.
_FIELDS = tuple(f.name for f in fields(RequestRecord))
_SETTERS = tuple(getattr(RequestRecord, name).__set__ for name in _FIELDS)
_TEMPLATE: list[Any] = [f.default for f in fields(RequestRecord)]
_I = {name: i for i, name in enumerate(_FIELDS)}
_OK_FIELDS = (
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
    "chunk_times_ns",
    "chunk_tokens",
    "warmup",
    "shared_prefix",
    "stream_end_ns",
    "first_event_ns",
    "worker",
)
_OK_INDEX = tuple(_I[name] for name in _OK_FIELDS)
#: every field record_ok leaves out has a plain default (else it falls back to the constructor)
_FAST = all(f.name in _OK_FIELDS or f.default is not MISSING for f in fields(RequestRecord))
_OK_SETTERS = tuple(_SETTERS[i] for i in _OK_INDEX)
_REST = tuple((_SETTERS[i], _TEMPLATE[i]) for i in range(len(_FIELDS)) if i not in _OK_INDEX)
_NEW = object.__new__

#: ``(1,) * n`` shared per length: every simulated chunk carries one token (bounded by the longest output)
_ONES: dict[int, tuple[int, ...]] = {}


def ones(n: int) -> tuple[int, ...]:
    """The tuple ``(1,) * n`` (one shared object per length; tuples are immutable)."""
    t = _ONES.get(n)
    if t is None:
        t = _ONES[n] = (1,) * n
    return t


def record_ok(spec: RequestSpec, scheduled_ns: int, prompt: int, replica: int, times: tuple[int, ...]) -> RequestRecord:
    """A successful request: one chunk per emitted token at its step's end time."""
    first, last, n = times[0], times[-1], len(times)
    if not _FAST:  # a field without a plain default was added: use the constructor
        return RequestRecord(
            id=spec.id,
            scheduled_ns=scheduled_ns,
            sent_ns=scheduled_ns,
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
            chunk_tokens=ones(n),
            warmup=spec.warmup,
            shared_prefix=spec.prefix_id is not None,
            stream_end_ns=last,
            first_event_ns=first,
            worker=replica,
        )
    r = _NEW(RequestRecord)
    for setter, value in zip(
        _OK_SETTERS,
        (
            spec.id,
            scheduled_ns,
            scheduled_ns,
            first,
            last,
            Status.OK,
            spec.request_class,
            spec.session_id,
            spec.turn,
            prompt,
            n,
            spec.output_tokens,
            TokensSource.ENGINE,
            times,
            ones(n),
            spec.warmup,
            spec.prefix_id is not None,
            last,
            first,
            replica,
        ),
        strict=True,
    ):
        setter(r, value)
    for setter, value in _REST:
        setter(r, value)
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
) -> RequestRecord:
    """A request the engine refused (too long for its KV cache) or one still in flight at the horizon."""
    return RequestRecord(
        id=spec.id,
        scheduled_ns=scheduled_ns,
        sent_ns=scheduled_ns,
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
    )
