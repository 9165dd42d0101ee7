"""The OpenAI-compatible streaming client: one request in, one :class:`RequestRecord` out.

Timing: every body chunk carries its arrival stamp from the transport (docs/metrics.md, "Arrival": the kernel's receive
time where possible, else the moment the event loop hands it over); all events parsed from that chunk share the stamp
(they arrived together). A token-bearing event is one whose first choice carries non-empty ``delta.content`` /
``delta.reasoning_content`` / ``delta.reasoning`` (chat) or ``text`` (completions); a role-only delta is not a token.
Failures never raise: they become records with an error class and partial timings. The request's options, body and
headers are built in :mod:`tailscope.client.request`.
"""

from __future__ import annotations

import asyncio
import errno
from array import array
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from tailscope.client import hot as _hot
from tailscope.client.hot import HOT
from tailscope.client.request import ClientOptions as ClientOptions
from tailscope.client.request import Timeouts as Timeouts
from tailscope.client.request import build_body, request_headers
from tailscope.client.sse import SSEParser
from tailscope.client.transport import Transport
from tailscope.clock import Clock
from tailscope.errors import SSEError
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.workload.template import TemplateError


@dataclass(slots=True)
class Outcome:
    """A finished request: the record plus the generated text (for multi-turn sessions)."""

    record: RequestRecord
    text: str


def classify_status(status: int) -> ErrorClass:
    """Error class for a non-200 HTTP status."""
    if status == 429:
        return ErrorClass.HTTP_429
    if status == 401:
        return ErrorClass.HTTP_401
    if 400 <= status < 500:
        return ErrorClass.HTTP_4XX
    if status >= 500:
        return ErrorClass.HTTP_5XX
    return ErrorClass.OTHER


async def _timed(resp: Any, clock: Clock) -> AsyncIterator[tuple[int, bytes]]:
    """Body chunks with their arrival stamps: the transport's own stamps when it takes them at the socket (the raw
    transport, on ``perf_counter_ns``), else the clock read when the chunk is handed over."""
    timed = getattr(resp, "iter_timed_chunks", None)
    if timed is not None:
        async for pair in timed():
            yield pair
        return
    async for chunk in resp.iter_chunks():
        yield clock.now_ns(), chunk


def _classify_exception(exc: BaseException) -> ErrorClass:
    import aiohttp

    from tailscope.client import rawhttp

    if isinstance(exc, rawhttp.ConnectTimeout):
        return ErrorClass.TIMEOUT_CONNECT
    if isinstance(exc, rawhttp.ConnectFailed):
        return ErrorClass.CONNECT
    if isinstance(exc, rawhttp.StreamClosed | rawhttp.ProtocolViolation):
        return ErrorClass.STREAM_BROKEN

    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ServerTimeoutError):
        return ErrorClass.TIMEOUT_CONNECT
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return ErrorClass.CONNECT
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | ConnectionResetError):
        return ErrorClass.STREAM_BROKEN
    if isinstance(exc, aiohttp.ClientOSError | OSError):
        # a reset or broken pipe on an established connection cut the exchange; anything else is connecting
        if getattr(exc, "errno", None) in (errno.ECONNRESET, errno.EPIPE):
            return ErrorClass.STREAM_BROKEN
        return ErrorClass.CONNECT
    if isinstance(exc, aiohttp.ClientResponseError):
        return ErrorClass.STREAM_BROKEN
    return ErrorClass.OTHER


class _State:
    """Mutable per-request accumulator (kept out of the record until the end)."""

    __slots__ = (
        "cached_tokens",
        "chunk_times",
        "chunk_tokens",
        "completion_tokens",
        "done",
        "finished",
        "first_answer",
        "first_event",
        "input_tokens",
        "last_usage_completion",
        "reasoning",
        "reasoning_usage",
        "request_id",
        "stream_end",
        "texts",
        "usage_per_chunk",
    )

    def __init__(self) -> None:
        # compact arrays of machine ints, not lists of int objects: 8 bytes per token event while streaming
        self.chunk_times = array("q")
        self.chunk_tokens = array("q")
        self.texts: list[str] = []
        self.first_event: int | None = None
        self.stream_end: int | None = None
        self.input_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.last_usage_completion = 0
        self.usage_per_chunk = False
        self.request_id: str | None = None
        self.done = False
        self.finished = False  # a choice carried finish_reason: the answer is whole even if no [DONE] follows
        self.first_answer: int | None = None  # the first content token (after any reasoning)
        self.reasoning = 0  # tokens of reasoning events
        self.reasoning_usage: int | None = None  # the server's usage.completion_tokens_details.reasoning_tokens
        self.cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens


class _Deadlines:
    """A request's first-token and total deadlines on one loop timer, as ``asyncio.timeout_at`` would enforce them.

    The timer is armed once, at the earlier deadline; a token that arrives in time does not move it (``reschedule``
    costs a timer cancel and a new timer on every request): when it fires at the first-token deadline and a token is
    in, it re-arms for the total deadline. Expiry cancels the task, and :meth:`close` turns that cancellation into a
    timeout exactly when ``asyncio.Timeout.__aexit__`` would (no other cancel request pending).
    """

    __slots__ = ("_cancelling", "_handle", "_loop", "_st", "_task", "_total", "_when", "fired")

    def __init__(self, loop: asyncio.AbstractEventLoop, st: _State, first: float, total: float) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a request must run inside a task")
        self._loop = loop
        self._st = st
        self._task = task
        self._total = total
        self._cancelling = task.cancelling()
        self.fired = False
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._arm(min(first, total))

    def _arm(self, when: float) -> None:
        self._when = when
        loop = self._loop
        if when <= loop.time():
            self._handle = loop.call_soon(self._on_timer)
        else:
            self._handle = loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        if self._when != self._total and self._st.chunk_times:
            self._arm(self._total)  # the first token came in time: the total deadline applies now
            return
        self._handle = None
        self.fired = True
        self._task.cancel()

    def close(self, *, cancelled: bool) -> bool:
        """Disarm; True when the deadline's expiry is why the task was ``cancelled`` (no other cancel pending)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self.fired:
            return False
        self.fired = False
        return self._task.uncancel() <= self._cancelling and cancelled


async def execute(
    transport: Transport,
    opts: ClientOptions,
    *,
    request_id: int,
    prompt: str | list[dict[str, str]],
    max_tokens: int,
    scheduled_ns: int,
    t0_ns: int,
    clock: Clock,
    timeouts: Timeouts,
    count_tokens: Callable[[str], int] | None = None,
    request_class: str = "default",
    session_id: str | None = None,
    turn: int | None = None,
    warmup: bool = False,
    shared_prefix: bool = False,
    input_tokens_hint: int | None = None,
    worker: int = 0,
    trace_id: str | None = None,
    span_id: str | None = None,
    step: str | None = None,
    depends_on: tuple[int, ...] = (),
    session_calls: int | None = None,
) -> Outcome:
    """Send one streaming request and measure it.

    Args:
        scheduled_ns: intended send time, ns since run start (``t0_ns``).
        count_tokens: a local tokenizer's counter, used when the server does not report usage per chunk.
        input_tokens_hint: the synthesized prompt length, kept when the server reports no usage.
        trace_id, span_id: W3C trace context sent as ``traceparent`` (both precomputed in the schedule), kept in
            the record; ``None`` sends none.
        step, depends_on: an agent call's step name and the requests it waited for, kept in the record.
        session_calls: an agent call's session as drawn (its call count), kept in the record so that a session the
            stop cut is told apart.

    Returns:
        The record (never raises for server or network faults; cancellation yields an ``incomplete`` record).
    """
    body = build_body(opts, prompt, max_tokens, opts.class_extra_body.get(request_class))
    tpl = opts.template
    consume = _consume if tpl is None else tpl.consume
    headers = request_headers(opts, trace_id, span_id)
    st = _State()
    sent_ns = clock.now_ns() - t0_ns
    status = Status.OK
    error: ErrorClass | None = None
    detail: str | None = None
    http_status: int | None = None
    conn: tuple[bool | None, int | None, int | None, int | None] = (None, None, None, None)
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines(loop, st, loop.time() + timeouts.first_token_s, loop.time() + timeouts.total_s)
    try:
        try:
            async with transport.post(opts.path, body, headers) as resp:
                wrote = getattr(resp, "sent_ns", None)
                if type(wrote) is int and wrote > 0:
                    sent_ns = wrote - t0_ns  # the request left at the socket (after any connect), on the same clock
                http_status = resp.status
                conn = getattr(resp, "connection", conn)  # reused?, DNS, connect, TLS (the raw transport says)
                st.request_id = resp.headers.get("x-request-id")
                if resp.status != 200:
                    error = classify_status(resp.status)
                    text = await resp.read_text()
                    detail = _error_detail(resp.status, resp.headers, text)
                    status = Status.ERROR
                else:
                    parser: Any = (tpl.parser() if tpl is not None else None) or SSEParser()
                    push = getattr(resp, "consume", None)
                    if push is not None:
                        # the raw transport calls us from its protocol: no task switch per network read

                        await push(push_handler(parser, st, count_tokens, t0_ns, consume))
                    else:
                        async for stamp, chunk in _timed(resp, clock):
                            consume(parser.feed_data(chunk), stamp - t0_ns, st, count_tokens)
                            if st.done:
                                break
                    if not st.done:
                        consume(parser.close_data(), clock.now_ns() - t0_ns, st, count_tokens)
                    st.stream_end = clock.now_ns() - t0_ns
                    if st.finished:
                        st.done = True  # ended cleanly after finish_reason (transformers serve sends no [DONE])
                    if tpl is not None and tpl.ends_with_body():
                        st.done = True  # no end marker: a body that ended is a whole answer
                    if not st.done:
                        status, error, detail = Status.ERROR, ErrorClass.STREAM_BROKEN, "stream ended without [DONE]"
                    elif not st.chunk_times:
                        status, error, detail = Status.ERROR, ErrorClass.EMPTY_RESPONSE, "no token in the stream"
        except asyncio.CancelledError:
            if deadlines.close(cancelled=True):
                raise TimeoutError from None  # the deadline's own cancellation (no other cancel pending)
            raise
        finally:
            deadlines.close(cancelled=False)
    except TimeoutError:
        status = Status.ERROR
        if st.chunk_times:
            error, detail = ErrorClass.TIMEOUT_TOTAL, f"no completion within {timeouts.total_s:g} s"
        else:
            error, detail = ErrorClass.TIMEOUT_FIRST_TOKEN, f"no first token within {timeouts.first_token_s:g} s"
    except _ServerErrorEvent as exc:
        status, error, detail = Status.ERROR, ErrorClass.SERVER_ERROR_EVENT, str(exc)[:500]
    except TemplateError as exc:
        status = Status.ERROR
        error = ErrorClass.SERVER_ERROR_EVENT if exc.server_error else ErrorClass.MALFORMED_SSE
        detail = str(exc)[:500]
    except (SSEError, _MalformedEvent) as exc:
        status, error, detail = Status.ERROR, ErrorClass.MALFORMED_SSE, str(exc)[:500]
    except asyncio.CancelledError:
        status, error, detail = (
            Status.INCOMPLETE,
            ErrorClass.CANCELLED,
            "the run stopped while the request was in flight",
        )
    except Exception as exc:
        status, error = Status.ERROR, _classify_exception(exc)
        detail = f"{type(exc).__name__}: {exc}"[:500]
    end_ns: int | None
    if status is Status.OK:
        end_ns = st.chunk_times[-1]
    else:
        end_ns = clock.now_ns() - t0_ns
    # tokens_source names where the per-chunk counts came from; N prefers the server's final usage.
    if st.usage_per_chunk:
        source = TokensSource.USAGE
    elif count_tokens is not None:
        source = TokensSource.TOKENIZER
    else:
        source = TokensSource.CHUNKS
    n_out = st.completion_tokens if st.completion_tokens is not None else (sum(st.chunk_tokens) or None)
    record = RequestRecord(
        id=request_id,
        scheduled_ns=scheduled_ns,
        sent_ns=sent_ns,
        first_token_ns=st.chunk_times[0] if st.chunk_times else None,
        end_ns=end_ns,
        status=status,
        request_class=request_class,
        session_id=session_id,
        turn=turn,
        input_tokens=st.input_tokens if st.input_tokens is not None else input_tokens_hint,
        output_tokens=n_out,
        requested_output_tokens=max_tokens,
        tokens_source=source,
        error=error,
        error_detail=detail,
        http_status=http_status,
        server_request_id=st.request_id,
        chunk_times_ns=tuple(st.chunk_times),
        chunk_tokens=tuple(st.chunk_tokens),
        warmup=warmup,
        shared_prefix=shared_prefix,
        stream_end_ns=st.stream_end,
        first_event_ns=st.first_event,
        worker=worker,
        first_answer_ns=(st.chunk_times[0] if st.chunk_times else None) if tpl is not None else st.first_answer,
        reasoning_tokens=st.reasoning_usage if st.reasoning_usage is not None else (st.reasoning or None),
        cached_tokens=st.cached_tokens,
        trace_id=trace_id,
        span_id=span_id,
        connection_reused=conn[0],
        dns_ns=conn[1],
        connect_ns=conn[2],
        tls_ns=conn[3],
        step=step,
        depends_on=depends_on,
        session_calls=session_calls,
    )
    return Outcome(record=record, text="".join(st.texts))


class _MalformedEvent(Exception):
    pass


class _ServerErrorEvent(Exception):
    pass


def _consume_py(payloads: list[bytes], now: int, st: _State, count_tokens: Callable[[str], int] | None) -> None:
    """Account the data payloads that arrived together at ``now`` (the client's hot path: keep it lean; its compiled
    twin is ``_hot.consume``, bound as :func:`_consume` where it is built)."""
    if st.first_event is None and payloads:
        st.first_event = now
    for data in payloads:
        if data == b"[DONE]":
            st.done = True
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _MalformedEvent(f"data line is not JSON (or not UTF-8): {data[:120]!r}") from None
        if type(obj) is not dict:
            raise _MalformedEvent(f"data line is not a JSON object: {data[:120]!r}")
        choices = obj.get("choices")
        usage = obj.get("usage")
        if st.request_id is None:
            rid = obj.get("id")
            if isinstance(rid, str):
                st.request_id = rid
        ct = None
        if usage:
            ct = usage.get("completion_tokens")
            pt = usage.get("prompt_tokens")
            if type(pt) is int:
                st.input_tokens = pt
            if type(ct) is int:
                st.completion_tokens = ct
            else:
                ct = None
            details = usage.get("prompt_tokens_details")
            if details and type(cached := details.get("cached_tokens")) is int:
                st.cached_tokens = cached
            details = usage.get("completion_tokens_details")
            if details and type(rt := details.get("reasoning_tokens")) is int:
                st.reasoning_usage = rt
        if not choices:
            if "error" in obj:
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                raise _ServerErrorEvent(f"server sent an error event: {msg}")
            continue
        c0 = choices[0]
        if c0.get("finish_reason"):
            st.finished = True
        delta = c0.get("delta")
        reasoning = False
        if delta is not None:
            text = delta.get("content")
            if not text:
                text = delta.get("reasoning_content") or delta.get("reasoning")
                reasoning = True
        else:
            text = c0.get("text")
        if not text:
            continue
        if not reasoning and st.first_answer is None:
            st.first_answer = now
        st.chunk_times.append(now)
        st.texts.append(text)
        if ct is not None:
            st.usage_per_chunk = True
            k = ct - st.last_usage_completion
            st.chunk_tokens.append(k if k > 1 else 1)
            st.last_usage_completion = ct
        elif count_tokens is not None:
            st.chunk_tokens.append(max(count_tokens(text), 1))
        else:
            st.chunk_tokens.append(1)
        if reasoning:
            st.reasoning += st.chunk_tokens[-1]


if HOT is not None:
    HOT.configure(orjson.loads, orjson.JSONDecodeError, _MalformedEvent, _ServerErrorEvent)
    _consume: Callable[[list[bytes], int, _State, Callable[[str], int] | None], None] = HOT.consume
else:
    _consume = _consume_py


def push_handler(
    parser: Any,
    st: _State,
    count_tokens: Callable[[str], int] | None,
    t0_ns: int,
    consume: Callable[[list[bytes], int, _State, Callable[[str], int] | None], None] | None = None,
) -> Callable[[int, bytes], bool]:
    """The handler the raw transport calls per body piece in push mode: ``(arrival stamp, piece) -> done``, accounting
    the piece into ``st`` at ``stamp - t0_ns``. For the OpenAI SSE stream (``consume`` None or ``_consume``, an
    :class:`SSEParser`) and the compiled loop in use, ``_hot.Sink`` — this closure in C (its per-piece step is
    ``_hot.event``)."""
    consume = consume or _consume
    hot = _hot.HOT
    if hot is not None and type(parser) is SSEParser and consume is hot.consume:
        return hot.Sink(parser, st, count_tokens, t0_ns)  # type: ignore[no-any-return]

    def on_data(stamp: int, chunk: bytes) -> bool:
        consume(parser.feed_data(chunk), stamp - t0_ns, st, count_tokens)
        return st.done

    return on_data


def _error_detail(status: int, headers: Any, text: str) -> str:
    snippet = " ".join(text.split())[:300]
    if snippet.lstrip().lower().startswith(("<!doctype", "<html")):
        snippet = "HTML page: " + snippet[:120]
    retry = headers.get("Retry-After") if hasattr(headers, "get") else None
    extra = f" (Retry-After: {retry})" if retry else ""
    return f"HTTP {status}{extra}: {snippet}"
