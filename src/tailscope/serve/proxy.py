"""``tailscope proxy``: a fault-injecting proxy to put in front of any dependency (asyncio; 127.0.0.1 by default).

Two modes:

* ``http`` (default): a reverse proxy that streams responses chunk by chunk (SSE passes through as it comes); rules
  apply per request and may answer an HTTP error instead of forwarding.
* ``tcp``: bytes both ways; rules apply per connection (no statuses or paths).

Each request (connection) draws every rule whose ``share`` and ``path`` match; the effects add up: upstream latency
before forwarding, downstream latency before the response's first byte, an error status, a reset after N response
bytes, one stall after N response bytes, a bandwidth cap, a black hole. The rules change live over the admin API
(its own port): ``GET /rules`` (rules and counters), ``POST /rules`` (add a rule or a list; a rule with the same name
is replaced), ``PUT /rules`` (replace them all), ``DELETE /rules`` (clear), ``DELETE /rules/NAME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tailscope.errors import ConfigError, TargetError
from tailscope.io.proxy_rules import ProxyRule, check_rules_for_mode, rules_from_json
from tailscope.record_ops import record_dict
from tailscope.serve.site import serve_site

#: Request headers that are the connection's, not the request's (not forwarded).
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass(slots=True)
class Effects:
    """What the matching rules do to one request (connection)."""

    delay_up_s: float = 0.0
    delay_down_s: float = 0.0
    error_status: int | None = None
    reset_after: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0
    bytes_per_s: float | None = None
    blackhole: bool = False
    rules: list[str] = field(default_factory=list)


def draw(rules: Sequence[ProxyRule], path: str | None, rng: random.Random) -> Effects:
    """The effects of ``rules`` on one request: each rule applies with its share (and path prefix)."""
    fx = Effects()
    for r in rules:
        if r.path is not None and path is not None and not path.startswith(r.path):
            continue
        if r.share < 1.0 and rng.random() >= r.share:
            continue
        fx.rules.append(r.name)
        if r.latency is not None:
            fx.delay_up_s += r.latency.sample_s(rng)
        if r.latency_down is not None:
            fx.delay_down_s += r.latency_down.sample_s(rng)
        if r.error_status is not None and fx.error_status is None:
            fx.error_status = r.error_status
        if r.reset_after_bytes is not None:
            fx.reset_after = (
                min(fx.reset_after, r.reset_after_bytes) if fx.reset_after is not None else r.reset_after_bytes
            )
        if r.stall_after_bytes is not None and fx.stall_after is None:
            fx.stall_after, fx.stall_s = r.stall_after_bytes, r.stall_ms / 1e3
        if r.bandwidth_kbps is not None:
            bps = r.bandwidth_kbps * 1000.0
            fx.bytes_per_s = min(fx.bytes_per_s, bps) if fx.bytes_per_s is not None else bps
        fx.blackhole = fx.blackhole or r.blackhole
    return fx


@dataclass
class ProxyStats:
    """Counters since the proxy started."""

    requests: int = 0
    forwarded: int = 0
    delayed: int = 0
    errors_injected: int = 0
    resets: int = 0
    stalls: int = 0
    blackholed: int = 0
    throttled: int = 0
    upstream_errors: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


class _Writer:
    """Writes the downstream bytes through the stall, reset and bandwidth effects."""

    def __init__(self, fx: Effects, stats: ProxyStats) -> None:
        self.fx, self.stats = fx, stats
        self.sent = 0
        self.stalled = False
        self._next = time.monotonic()

    async def before(self, n: int) -> None:
        """Pace ``n`` bytes (bandwidth) and stall once when the stall point is reached."""
        fx = self.fx
        if fx.stall_after is not None and not self.stalled and self.sent >= fx.stall_after:
            self.stalled = True
            self.stats.stalls += 1
            await asyncio.sleep(fx.stall_s)
        if fx.bytes_per_s is not None and n:
            now = time.monotonic()
            self._next = max(self._next, now) + n / fx.bytes_per_s
            delay = self._next - now - n / fx.bytes_per_s
            if delay > 0:
                await asyncio.sleep(delay)

    def must_reset(self) -> bool:
        return self.fx.reset_after is not None and self.sent >= self.fx.reset_after


async def _pump(writer: _Writer, data: bytes, send: Any) -> bool:
    """Send ``data`` through the effects; False when the connection must be reset."""
    fx = writer.fx
    while data:
        room = len(data)
        if fx.reset_after is not None:
            room = min(room, fx.reset_after - writer.sent)
            if room <= 0:
                return False
        if fx.stall_after is not None and not writer.stalled:
            if writer.sent >= fx.stall_after:
                await writer.before(0)
            else:
                room = min(room, fx.stall_after - writer.sent)
        if fx.bytes_per_s is not None:
            room = min(room, max(1, int(fx.bytes_per_s / 20)))
        piece, data = data[:room], data[room:]
        await writer.before(len(piece))
        await send(piece)
        writer.sent += len(piece)
    if fx.stall_after is not None and not writer.stalled and writer.sent >= fx.stall_after:
        await writer.before(0)
    return not writer.must_reset()


class FaultProxy:
    """The proxy and its admin API; :meth:`start` binds both (port 0: a free one), :meth:`stop` closes them."""

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        admin_port: int | None = 0,
        rules: Sequence[ProxyRule] = (),
        mode: str = "http",
        seed: int = 0,
    ) -> None:
        if mode not in ("http", "tcp"):
            raise ConfigError(f"--mode {mode!r}: use http or tcp")
        check_rules_for_mode(rules, mode)
        self.mode = mode
        self.host, self.port, self.admin_port = host, port, admin_port
        self.upstream = upstream.rstrip("/")
        parts = urlsplit(self.upstream if "://" in self.upstream else f"tcp://{self.upstream}")
        if mode == "http" and parts.scheme not in ("http", "https"):
            raise ConfigError(f"--to {upstream!r}: an http proxy forwards to an http:// or https:// URL")
        if not parts.hostname or (parts.port is None and mode == "tcp"):
            raise ConfigError(f"--to {upstream!r}: give HOST:PORT (tcp) or a URL (http)")
        self._up_host = parts.hostname
        self._up_port = parts.port or (443 if parts.scheme == "https" else 80)
        self.rules: list[ProxyRule] = list(rules)
        self.stats = ProxyStats()
        self.rng = random.Random(seed)
        self.url = ""
        self.admin_url = ""
        self._runners: list[web.AppRunner] = []
        self._tcp: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    # -- rules ---------------------------------------------------------------------------------------------------
    def set_rules(self, rules: Sequence[ProxyRule]) -> None:
        check_rules_for_mode(rules, self.mode)
        self.rules = list(rules)

    def add_rules(self, rules: Sequence[ProxyRule]) -> None:
        """Add rules; one with the name of an existing rule replaces it."""
        check_rules_for_mode(rules, self.mode)
        names = {r.name for r in rules}
        self.rules = [r for r in self.rules if r.name not in names] + list(rules)

    def remove_rule(self, name: str) -> bool:
        before = len(self.rules)
        self.rules = [r for r in self.rules if r.name != name]
        return len(self.rules) < before

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "listen": self.url,
            "upstream": self.upstream,
            "rules": [r.to_dict() for r in self.rules],
            "stats": self.stats.to_dict(),
        }

    def _draw(self, path: str | None) -> Effects:
        fx = draw(self.rules, path, self.rng)
        st = self.stats
        st.requests += 1
        for name in fx.rules:
            st.by_rule[name] = st.by_rule.get(name, 0) + 1
        if fx.delay_up_s or fx.delay_down_s:
            st.delayed += 1
        if fx.bytes_per_s is not None:
            st.throttled += 1
        return fx

    # -- lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> str:
        """Bind the proxy and its admin API; returns :attr:`url`.

        Raises:
            TargetError: a port is taken.
        """
        try:
            if self.mode == "http":
                self._session = aiohttp.ClientSession(
                    auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
                )
                port = await self._site(self._proxy_app(), self.port)
                self.url = f"http://{self.host}:{port}"
            else:
                self._tcp = await asyncio.start_server(self._tcp_conn, self.host, self.port, reuse_address=True)
                port = int(self._tcp.sockets[0].getsockname()[1])
                self.url = f"tcp://{self.host}:{port}"
            if self.admin_port is not None:
                admin = await self._site(self._admin_app(), self.admin_port)
                self.admin_url = f"http://{self.host}:{admin}"
        except OSError as exc:
            await self.stop()
            raise TargetError(f"tailscope proxy: cannot listen on {self.host} ({exc.strerror or exc})") from None
        return self.url

    async def _site(self, app: web.Application, port: int) -> int:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        self._runners.append(runner)
        return await serve_site(runner, self.host, port)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self._tcp is not None:
            self._tcp.close()
            for w in list(self._conns):  # the open connections end (their reads fail), and so do their handlers
                w.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tcp.wait_closed(), 2.0)
            self._tcp = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- admin API -----------------------------------------------------------------------------------------------
    def _admin_app(self) -> web.Application:
        app = web.Application()

        async def get_rules(request: web.Request) -> web.StreamResponse:
            return web.json_response(self.state())

        async def change(request: web.Request) -> web.StreamResponse:
            try:
                body = json.loads(await request.text() or "null")
                rules = rules_from_json(body)
                if request.method == "PUT":
                    self.set_rules(rules)
                else:
                    self.add_rules(rules)
            except (ValueError, ConfigError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response(self.state())

        async def clear(request: web.Request) -> web.StreamResponse:
            self.rules = []
            return web.json_response(self.state())

        async def remove(request: web.Request) -> web.StreamResponse:
            name = request.match_info["name"]
            if not self.remove_rule(name):
                return web.json_response({"error": f"no rule named {name!r}"}, status=404)
            return web.json_response(self.state())

        app.router.add_get("/rules", get_rules)
        app.router.add_post("/rules", change)
        app.router.add_put("/rules", change)
        app.router.add_delete("/rules", clear)
        app.router.add_delete("/rules/{name}", remove)
        return app

    # -- HTTP mode -----------------------------------------------------------------------------------------------
    def _proxy_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._http)
        return app

    async def _http(self, request: web.Request) -> web.StreamResponse:
        fx = self._draw(request.path)
        st = self.stats
        if fx.blackhole:
            st.blackholed += 1
            await asyncio.Event().wait()  # until the client goes (handler cancellation) or the proxy stops
        body = await request.read()
        if fx.delay_up_s:
            await asyncio.sleep(fx.delay_up_s)
        if fx.error_status is not None:
            st.errors_injected += 1
            if fx.delay_down_s:
                await asyncio.sleep(fx.delay_down_s)
            return web.json_response(
                {
                    "error": {
                        "message": f"tailscope proxy: injected HTTP {fx.error_status} (rules {', '.join(fx.rules)})",
                        "type": "injected_fault",
                        "code": fx.error_status,
                    }
                },
                status=fx.error_status,
            )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            upstream = await self._session.request(
                request.method, self.upstream + request.rel_url.path_qs, headers=headers, data=body
            )
        except (aiohttp.ClientError, OSError) as exc:
            st.upstream_errors += 1
            return web.json_response(
                {"error": {"message": f"tailscope proxy: upstream {self.upstream}: {exc}", "type": "upstream_error"}},
                status=502,
            )
        try:
            st.forwarded += 1
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=out_headers)
            if fx.delay_down_s:
                await asyncio.sleep(fx.delay_down_s)
            if fx.reset_after == 0:
                return self._reset(request)
            await resp.prepare(request)
            writer = _Writer(fx, st)
            async for chunk in upstream.content.iter_any():
                if not await _pump(writer, chunk, resp.write):
                    return self._reset(request)
            await resp.write_eof()
            return resp
        finally:
            upstream.release()

    def _reset(self, request: web.Request) -> web.StreamResponse:
        self.stats.resets += 1
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError  # the connection is gone: nothing more to send

    # -- TCP mode ------------------------------------------------------------------------------------------------
    async def _tcp_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            await self._tcp_pipe(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _tcp_pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fx = self._draw(None)
        st = self.stats
        if fx.blackhole:
            st.blackholed += 1
            while await reader.read(65536):
                pass
            return
        if fx.delay_up_s:
            await asyncio.sleep(fx.delay_up_s)
        try:
            up_reader, up_writer = await asyncio.open_connection(self._up_host, self._up_port)
        except OSError:
            st.upstream_errors += 1
            return
        st.forwarded += 1

        async def upward() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
            with contextlib.suppress(OSError):
                up_writer.write_eof()

        async def send(piece: bytes) -> None:
            writer.write(piece)
            await writer.drain()

        async def downward() -> None:
            w = _Writer(fx, st)
            first = True
            while data := await up_reader.read(65536):
                if first and fx.delay_down_s:
                    await asyncio.sleep(fx.delay_down_s)
                first = False
                if not await _pump(w, data, send):
                    st.resets += 1
                    writer.transport.abort()
                    return
            with contextlib.suppress(OSError):
                writer.write_eof()

        self._conns.add(up_writer)
        up_task = asyncio.create_task(upward())
        try:
            await downward()
        finally:
            up_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                await up_task
            self._conns.discard(up_writer)
            up_writer.close()
