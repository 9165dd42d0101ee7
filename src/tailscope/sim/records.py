"""RequestRecords of simulated requests: the same results model as bench (``tokens_source = engine``)."""

from __future__ import annotations

from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.spec import RequestSpec


def record_ok(spec: RequestSpec, scheduled_ns: int, prompt: int, replica: int, times: tuple[int, ...]) -> RequestRecord:
    """A successful request: one chunk per emitted token at its step's end time."""
    return RequestRecord(
        id=spec.id,
        scheduled_ns=scheduled_ns,
        sent_ns=scheduled_ns,
        first_token_ns=times[0],
        end_ns=times[-1],
        status=Status.OK,
        request_class=spec.request_class,
        session_id=spec.session_id,
        turn=spec.turn,
        input_tokens=prompt,
        output_tokens=len(times),
        requested_output_tokens=spec.output_tokens,
        tokens_source=TokensSource.ENGINE,
        chunk_times_ns=times,
        chunk_tokens=(1,) * len(times),
        warmup=spec.warmup,
        shared_prefix=spec.prefix_id is not None,
        stream_end_ns=times[-1],
        first_event_ns=times[0],
        worker=replica,
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
