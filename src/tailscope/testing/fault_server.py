"""A deliberately broken HTTP server on raw sockets, for the fault-matrix tests and drills.

Requests are served in arrival order; request *i* gets ``faults[i % len(faults)]``. ``/v1/models`` always answers
normally (so preflight passes) and does not consume a fault. Faults:

``ok``             a normal stream (TTFT ``ttft_ms``, then ``tokens`` tokens every ``itl_ms``)
``reset``          read the request, then abort the connection with RST (reset before headers)
``http500``/``http502``/``http503``  an HTML error page with that status
``http429``        429 with ``Retry-After: 1``; ``http429_bare`` without it
``http401``/``http403``  JSON error bodies
``cut``            stream three tokens, then close mid-response (no terminating chunk)
``stall``          stream one token, then stall ``stall_ms`` before the rest
``hang``           send headers, then nothing (first-token timeout)
``slowloris``      never send the response headers
``notjson``        a ``data:`` line that is not JSON after one token
``badutf8``        a ``data:`` line with invalid UTF-8 after one token
``hugeline``       a single 10 MB line without a line end, then close
``error_event``    an ``{"error": …}`` event mid-stream
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from dataclasses import dataclass, field

from tailscope.testing.background import BackgroundServer


@dataclass(slots=True)
class FaultConfig:
    """Behaviour of the fault server (see the module doc for fault names)."""

    faults: list[str] = field(default_factory=lambda: ["ok"])
    ttft_ms: float = 20.0
    itl_ms: float = 5.0
    tokens: int = 8
    stall_ms: float = 3000.0


@dataclass(slots=True)
class FaultLog:
    """What the server did: per request index, the fault and (for ``ok``) the token send times."""

    served: list[str] = field(default_factory=list)
    token_ns: dict[int, list[int]] = field(default_factory=dict)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(i: int, text: str) -> bytes:
    obj = {"id": f"req-{i}", "choices": [{"index": 0, "delta": {"content": text}}]}
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class FaultServer(BackgroundServer):
    """The fault server in a background thread on 127.0.0.1 (context manager)."""

    what = "fault server"

    def __init__(self, cfg: FaultConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.log = FaultLog()
        self._n = 0
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _run_server(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port or 0, limit=1 << 20)
        self.port = server.sockets[0].getsockname()[1]
        await self._until_stopped()
        server.close()
        for w in list(self._writers):
            w.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
        length = 0
        for ln in lines[1:]:
            if ln.lower().startswith("content-length:"):
                length = int(ln.split(":", 1)[1])
        body = await reader.readexactly(length) if length else b""
        return path, body

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                req = await self._read_request(reader)
                if req is None:
                    return
                path, _ = req
                if path.endswith("/v1/models"):
                    # vLLM-like (it accepts ignore_eos and stream_options), so bench sends no dialect probe
                    body = b'{"object":"list","data":[{"id":"faulty","owned_by":"vllm"}]}'
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                        + body
                    )
                    await writer.drain()
                    continue
                i = self._n
                self._n += 1
                fault = self.cfg.faults[i % len(self.cfg.faults)]
                self.log.served.append(fault)
                keep = await self._serve(i, fault, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _tokens(
        self, i: int, writer: asyncio.StreamWriter, n: int, start: int, *, stall_after: int | None = None
    ) -> None:
        cfg = self.cfg
        times = self.log.token_ns.setdefault(i, [])
        deadline = start + int(cfg.ttft_ms * 1e6)
        for k in range(n):
            if stall_after is not None and k == stall_after:
                deadline += int(cfg.stall_ms * 1e6)
            delay = (deadline - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            times.append(time.perf_counter_ns())
            writer.write(_event(i, "tok "))
            await writer.drain()
            deadline += int(cfg.itl_ms * 1e6)

    async def _serve(self, i: int, fault: str, writer: asyncio.StreamWriter) -> bool:
        cfg = self.cfg
        start = time.perf_counter_ns()
        if fault == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if fault.startswith("http4") or fault.startswith("http5"):
            code = int(fault[4:7])
            reason = {
                500: "Internal Server Error",
                502: "Bad Gateway",
                503: "Service Unavailable",
                429: "Too Many Requests",
                401: "Unauthorized",
                403: "Forbidden",
            }[code]
            if code >= 500:
                body = f"<html><body><h1>{code} {reason}</h1></body></html>".encode()
                ctype = "text/html"
            else:
                body = json.dumps({"error": {"message": reason, "code": code}}).encode()
                ctype = "application/json"
            extra = "Retry-After: 1\r\n" if fault == "http429" else ""
            head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
            return True
        if fault == "slowloris":
            await asyncio.sleep(3600)
            return False
        writer.write(_HEAD)
        await writer.drain()
        if fault == "hang":
            await asyncio.sleep(3600)
            return False
        if fault == "ok":
            await self._tokens(i, writer, cfg.tokens, start)
        elif fault == "stall":
            await self._tokens(i, writer, cfg.tokens, start, stall_after=1)
        elif fault == "cut":
            await self._tokens(i, writer, 3, start)
            writer.transport.abort()
            return False
        elif fault in ("notjson", "badutf8", "error_event"):
            await self._tokens(i, writer, 1, start)
            payload = {
                "notjson": b"data: {oops this is not json\n\n",
                "badutf8": b'data: {"choices":[{"delta":{"content":"\xff\xfe"}}]}\n\n',
                "error_event": b'data: {"error":{"message":"engine overloaded","code":503}}\n\n',
            }[fault]
            writer.write(_chunk(payload))
        elif fault == "hugeline":
            writer.write(_chunk(b"data: " + b"x" * (10 * 1024 * 1024)))
            await writer.drain()
            writer.transport.abort()
            return False
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True
