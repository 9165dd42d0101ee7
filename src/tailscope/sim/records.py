"""RequestRecords of simulated requests: the same results model as bench (``tokens_source = engine``)."""

from __future__ import annotations

from typing import Any

from tailscope.errors import InternalError
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.spec import RequestSpec

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
    return _record(
        spec,
        scheduled_ns,
        prompt,
        replica,
        sent_ns,
        first_token_ns=first,
        end_ns=last,
        status=Status.OK,
        output_tokens=n,
        chunk_times_ns=times,
        chunk_tokens=ones(n),
        stream_end_ns=last,
        first_event_ns=first,
    )


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
    return _record(
        spec,
        scheduled_ns,
        prompt,
        max(replica, 0),
        sent_ns,
        first_token_ns=None,
        end_ns=now,
        status=Status.INCOMPLETE if incomplete else Status.ERROR,
        output_tokens=0,
        error=None if incomplete else ErrorClass.HTTP_4XX,
        error_detail=detail,
        http_status=None if incomplete else 400,
    )


def _record(
    spec: RequestSpec, scheduled_ns: int, prompt: int, replica: int, sent_ns: int | None, **outcome: Any
) -> RequestRecord:
    """The record of a simulated request: what it takes from its spec and placement (sent as scheduled unless
    ``sent_ns``), plus ``outcome`` (its times, status and tokens)."""
    return RequestRecord(
        id=spec.id,
        scheduled_ns=scheduled_ns,
        sent_ns=scheduled_ns if sent_ns is None else sent_ns,
        request_class=spec.request_class,
        session_id=spec.session_id,
        turn=spec.turn,
        input_tokens=prompt,
        requested_output_tokens=spec.output_tokens,
        tokens_source=TokensSource.ENGINE,
        warmup=spec.warmup,
        shared_prefix=spec.prefix_id is not None,
        worker=replica,
        step=spec.step,
        depends_on=tuple(d for d, _ in spec.after) if spec.after else (),  # the call-graph calls it waited for
        **outcome,
    )
