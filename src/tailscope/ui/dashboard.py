"""``tailscope ui``: a local, read-only dashboard over the store (aiohttp).

Pages: the runs list with filters (kind, tag, free text), a run page (the same self-contained report that
``tailscope report`` writes), a compare page for two or more runs, the JSON export of a run, and trace set pages
when the store holds spans.

Safety: it binds 127.0.0.1 unless told otherwise; while bound to a loopback address it answers only requests whose
``Host`` is a loopback name (so a web page elsewhere cannot reach it through DNS rebinding). With a token, every request
must carry it (``?token=…`` once — it is then kept in a same-site cookie — or the ``X-Tailscope-Token`` header). The
store is only ever read.

A front end like the CLI: it reads the store through the library (:mod:`tailscope.api.report`, which also prepares
every page's numbers) and draws with the renderers of :mod:`tailscope.report`.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tailscope.api.report import compare_html, run_export, run_index, stored_item, sweep_run_ids, trace_html
from tailscope.report.html import render_run_index, render_run_report

TOKEN_COOKIE = "tailscope_token"
TOKEN_HEADER = "X-Tailscope-Token"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: runs the list shows at most.
LIST_LIMIT = 500
#: bootstrap resamples for the dashboard's compare page (the CLI defaults to more).
DASHBOARD_RESAMPLES = 300

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) stays on this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_only(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _guard(token: str | None, loopback_only: bool) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if loopback_only and not is_loopback(_host_only(request.headers.get("Host", ""))):
            return web.Response(status=403, text="tailscope ui: this dashboard answers only to localhost / 127.0.0.1\n")
        set_cookie = False
        if token is not None:
            given = request.query.get("token") or request.headers.get(TOKEN_HEADER) or request.cookies.get(TOKEN_COOKIE)
            if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                return web.Response(status=401, text="tailscope ui: add ?token=… (the --token you started it with)\n")
            set_cookie = "token" in request.query
        response = await handler(request)
        if set_cookie:
            response.set_cookie(TOKEN_COOKIE, str(token), httponly=True, samesite="Strict")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response

    return guard


def _html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html", charset="utf-8")


class Dashboard:
    """The dashboard's handlers over one store (read per request, in a worker thread)."""

    def __init__(self, db: str | Path | None) -> None:
        self.db = db

    async def runs(self, request: web.Request) -> web.Response:
        kind = request.query.get("kind") or None
        tag = request.query.get("tag") or None
        text = request.query.get("q", "").strip()

        def build() -> str:
            index = run_index(store=self.db, kind=kind, tag=tag, text=text, limit=LIST_LIMIT)
            rows = [
                {"run": s.run, "tags": s.tags, "summary": s.summary or {}, "finished_at": s.finished_at}
                for s in index.runs
            ]
            return render_run_index(
                rows,
                index.trace_sets,
                store=index.store,
                exists=index.exists,
                kind=kind or "",
                tag=tag or "",
                q=text,
                limit=LIST_LIMIT,
            )

        return _html(await asyncio.to_thread(build))

    async def run_page(self, request: web.Request) -> web.Response:
        ref = request.match_info["run_id"]
        return _html(await asyncio.to_thread(lambda: render_run_report(stored_item(ref, store=self.db), nav=True)))

    async def run_export(self, request: web.Request) -> web.Response:
        ref = request.match_info["run_id"]
        doc = await asyncio.to_thread(run_export, ref, store=self.db)
        return web.Response(text=json.dumps(doc), content_type="application/json")

    async def compare(self, request: web.Request) -> web.Response:
        refs = [r for r in request.query.getall("run", []) if r]
        if len(refs) < 2:
            return web.Response(status=400, text="tailscope ui: pick two or more runs to compare (?run=A&run=B)\n")

        def build() -> str:
            items = [stored_item(ref, store=self.db) for ref in refs]
            return compare_html(items, resamples=DASHBOARD_RESAMPLES, nav=True)

        return _html(await asyncio.to_thread(build))

    async def sweep(self, request: web.Request) -> web.Response:
        sweep_id = request.match_info["sweep_id"]

        def build() -> str:
            from tailscope.errors import NotFoundError

            ids = sweep_run_ids(sweep_id, store=self.db)
            if len(ids) < 2:
                raise NotFoundError(f"sweep {sweep_id!r} has {len(ids)} run(s) in the store; a sweep page needs two")
            items = [stored_item(ref, store=self.db) for ref in ids]
            return compare_html(items, resamples=DASHBOARD_RESAMPLES, nav=True)

        return _html(await asyncio.to_thread(build))

    async def trace_set(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        after = request.query.get("after") or None
        return _html(await asyncio.to_thread(lambda: trace_html(name, after, store=self.db, nav=True)))


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    from tailscope.errors import NotFoundError, TailscopeError

    try:
        return await handler(request)
    except NotFoundError as exc:
        return web.Response(status=404, text=f"tailscope ui: {exc}\n")
    except TailscopeError as exc:
        return web.Response(status=400, text=f"tailscope ui: {exc}\n")


def create_app(
    db: str | Path | None = None, *, token: str | None = None, loopback_only: bool = True
) -> web.Application:
    """The dashboard application.

    Args:
        db: the store (``None`` = ``$TAILSCOPE_DB`` or ``./.tailscope/tailscope.duckdb``).
        token: when set, every request must carry it.
        loopback_only: refuse requests whose ``Host`` is not a loopback name (set when bound to loopback).
    """
    dash = Dashboard(db)
    app = web.Application(middlewares=[_guard(token, loopback_only), _errors])
    app.router.add_get("/", dash.runs)
    app.router.add_get("/runs/{run_id}", dash.run_page)
    app.router.add_get("/runs/{run_id}/export.json", dash.run_export)
    app.router.add_get("/compare", dash.compare)
    app.router.add_get("/sweeps/{sweep_id}", dash.sweep)
    app.router.add_get("/traces/{name}", dash.trace_set)
    return app


def run_dashboard(
    db: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    token: str | None = None,
    on_start: Callable[[str, bool], None] | None = None,
) -> None:
    """Serve the dashboard until interrupted (``tailscope ui``); ``on_start`` is called with the URL to open and
    whether the address is loopback, just before it listens.

    Raises:
        ConfigError: a port outside 1-65535, an empty token, or an address it cannot listen on.
    """
    from tailscope.errors import ConfigError

    if not 0 < port < 65536:
        raise ConfigError(f"--port must be 1-65535 (got {port})")
    if token is not None and not token:
        raise ConfigError("--token must not be empty")
    loopback = is_loopback(host)
    app = create_app(db, token=token, loopback_only=loopback)
    shown = f"[{host}]" if ":" in host else host
    wildcard = host in ("0.0.0.0", "::")  # noqa: S104 (only to print a URL a browser can open)
    url = f"http://{'127.0.0.1' if wildcard else shown}:{port}/" + (f"?token={token}" if token else "")
    if on_start is not None:
        on_start(url, loopback)
    try:
        web.run_app(app, host=host, port=port, print=None, access_log=None)
    except OSError as exc:
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({exc.strerror}); try another --port"
        ) from None
