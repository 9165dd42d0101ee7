"""An OTLP trace receiver that hands spans to a sink: OTLP/HTTP (``POST /v1/traces``, JSON and protobuf) and, with
``grpc_port`` (needs the optional ``grpcio``), OTLP/gRPC (``TraceService/Export``, what vLLM and most SDKs send by
default).

Binds to 127.0.0.1 by default. Bodies above ``max_body_bytes`` get 413, malformed bodies 400 (with the reason), a
missing or wrong bearer token 401 when a token is set. ``Content-Encoding: gzip`` is accepted (the size limit
applies to the inflated body). Spans are buffered and
handed to the sink (e.g. the store) from a worker thread every ``flush_interval_s`` and on stop, so a slow store never
blocks exporters.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hmac
import json
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from tailscope.errors import ConfigError, TraceFormatError
from tailscope.records import Span
from tailscope.trace.ingest.common import ParseContext, loads_json, row_span
from tailscope.trace.ingest.otlp import parse_otlp_json, parse_otlp_proto
from tailscope.trace.layers import LayerRule

Sink = Callable[[list[Span]], object]
#: the OTLP/gRPC trace service (its one method is ``Export``)
GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class OtlpReceiver:
    """OTLP/HTTP receiver.

    Args:
        sink: called (in a worker thread) with each batch of received spans.
        host: address to bind (127.0.0.1 unless you mean to expose it).
        port: TCP port (0 picks a free one; see :attr:`port` after :meth:`start`).
        token: when set, requests must carry ``Authorization: Bearer <token>``.
        max_body_bytes: request bodies above this (after decompression too) are rejected with 413.
        flush_interval_s: how often buffered spans go to the sink.
        rules: user layer rules applied to received spans.
        grpc_port: also receive OTLP/gRPC on this port (0 picks a free one; None = HTTP only).
    """

    def __init__(
        self,
        sink: Sink,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        token: str | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
        flush_interval_s: float = 1.0,
        rules: Sequence[LayerRule] = (),
        grpc_port: int | None = None,
    ) -> None:
        self.sink = sink
        self.grpc_port = grpc_port
        self._grpc_server: Any = None
        self.host = host
        self.port = port
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.flush_interval_s = flush_interval_s
        self.rules = rules
        self.received = 0
        self.rejected = 0
        self.requests = 0
        self._buffer: list[Span] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._sink_error: BaseException | None = None

    def app(self) -> web.Application:
        """The aiohttp application (exposed for tests)."""
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/v1/traces", self._handle)
        return app

    async def start(self) -> None:
        """Bind and start serving; :attr:`port` (and :attr:`grpc_port`) hold the bound ports afterwards."""
        if self.grpc_port is not None:  # first: a missing grpcio is said before anything listens
            await self._start_grpc()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        addresses = self._runner.addresses  # the bound socket tells the real port when 0 was asked for
        if addresses:
            self.port = int(addresses[0][1])
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _start_grpc(self) -> None:
        try:
            import grpc
        except ImportError:
            raise ConfigError("--grpc-port needs grpcio: pip install 'tailscope[grpc]'") from None
        handler = grpc.method_handlers_generic_handler(
            GRPC_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._grpc_export)}
        )  # no (de)serializers: the method gets the request's bytes and returns the response's
        options = [("grpc.max_receive_message_length", self.max_body_bytes), ("grpc.so_reuseport", 0)]
        server = grpc.aio.server(options=options)  # no port sharing: a port in use is an error, as for HTTP
        server.add_generic_rpc_handlers((handler,))
        try:
            port = server.add_insecure_port(f"{self.host}:{self.grpc_port}")
        except RuntimeError:
            port = 0
        if port == 0:
            await server.stop(None)
            raise ConfigError(f"--grpc-port {self.grpc_port}: cannot bind {self.host}:{self.grpc_port} (in use?)")
        await server.start()
        self.grpc_port = port
        self._grpc_server = server

    async def _grpc_export(self, body: bytes, context: Any) -> bytes:
        import grpc

        self.requests += 1
        if self.token:
            got = dict(context.invocation_metadata() or ()).get("authorization", "")
            if not hmac.compare_digest(str(got).encode(), f"Bearer {self.token}".encode()):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        ctx = ParseContext(source="otlp/grpc", rules=self.rules, max_problems=20)
        try:
            spans = [row_span(r) for r in parse_otlp_proto(body, ctx)]
        except TraceFormatError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not spans and ctx.problems:
            self.rejected += ctx.dropped
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(str(p) for p in ctx.problems[:5]))
        with self._lock:
            self._buffer.extend(spans)
        self.received += len(spans)
        self.rejected += ctx.dropped
        out = _success(True, ctx).body
        assert isinstance(out, bytes)
        return out

    async def stop(self) -> None:
        """Stop serving and hand every buffered span to the sink."""
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=1.0)
            self._grpc_server = None
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self._runner is not None:
            await self._runner.cleanup()
        await asyncio.to_thread(self.flush)
        if self._sink_error is not None:
            raise self._sink_error

    def flush(self) -> int:
        """Hand buffered spans to the sink now; return how many."""
        with self._lock:
            batch, self._buffer = self._buffer, []
        if batch:
            self.sink(batch)
        return len(batch)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await asyncio.to_thread(self.flush)
            except Exception as exc:  # keep receiving; stop() re-raises the last sink failure
                self._sink_error = exc

    def _authorized(self, request: web.Request) -> bool:
        if not self.token:
            return True
        header = request.headers.get("Authorization", "")
        expected = f"Bearer {self.token}"
        return hmac.compare_digest(header.encode(), expected.encode())

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if not self._authorized(request):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"body larger than {self.max_body_bytes} bytes"}, status=413)
        encoding = request.headers.get("Content-Encoding", "").lower()
        # aiohttp inflates compressed request bodies itself (within client_max_size); inflate here only if not.
        if encoding == "gzip" and body[:2] == b"\x1f\x8b":
            try:
                body = _decompress(body, encoding, self.max_body_bytes)
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=413 if "larger" in str(exc) else 400)
        ctype = request.content_type.lower()
        proto = "protobuf" in ctype
        ctx = ParseContext(source="otlp/http", rules=self.rules, max_problems=20)
        try:
            if proto:
                spans = [row_span(r) for r in parse_otlp_proto(body, ctx)]
            else:
                try:
                    doc = loads_json(body)
                except json.JSONDecodeError as exc:
                    return web.json_response({"error": f"malformed JSON: {exc}"}, status=400)
                spans = [row_span(r) for r in parse_otlp_json(doc, ctx)]
        except TraceFormatError as exc:
            return web.json_response({"error": str(exc)}, status=415)
        if not spans and ctx.problems:
            self.rejected += ctx.dropped
            return web.json_response({"error": "; ".join(str(p) for p in ctx.problems[:5])}, status=400)
        with self._lock:
            self._buffer.extend(spans)
        self.received += len(spans)
        self.rejected += ctx.dropped
        return _success(proto, ctx)


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    try:
        if encoding == "gzip":
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            d = zlib.decompressobj()
        out = d.decompress(body, limit + 1)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"malformed {encoding} body: {exc}") from None
    if len(out) > limit:
        raise ValueError(f"body larger than {limit} bytes after decompression")
    return out


def _success(proto: bool, ctx: ParseContext) -> web.Response:
    partial: dict[str, Any] = {}
    if ctx.dropped:
        partial = {"rejectedSpans": str(ctx.dropped), "errorMessage": "; ".join(str(p) for p in ctx.problems[:3])}
    if proto:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        resp = ExportTraceServiceResponse()
        if partial:
            resp.partial_success.rejected_spans = ctx.dropped
            resp.partial_success.error_message = partial["errorMessage"]
        return web.Response(body=resp.SerializeToString(), content_type="application/x-protobuf")
    return web.json_response({"partialSuccess": partial} if partial else {})
