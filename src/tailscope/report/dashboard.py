"""``tailscope ui``: a local, read-only dashboard over the store (aiohttp).

Pages: the runs list with filters (kind, tag, free text), a run page (the same self-contained report that
``tailscope report`` writes), a compare page for two or more runs, the JSON export of a run, and trace set pages
when the store holds spans.

Safety: it binds 127.0.0.1 unless told otherwise; while bound to a loopback address it answers only requests whose
``Host`` is a loopback name (so a web page elsewhere cannot reach it through DNS rebinding). With a token, every request
must carry it (``?token=…`` once — it is then kept in a same-site cookie — or the ``X-Tailscope-Token`` header). The
store is only ever opened read-only.
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

from tailscope.metrics.document import build_export, clean_json, run_to_json
from tailscope.records import RequestRecord
from tailscope.report.html import ReportRun, _env, fmt_num, lookup, render_compare_report, render_run_report
from tailscope.store.runs import RunStore

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


def load_report_run(store: RunStore, ref: str) -> ReportRun:
    """A stored run as the report reads it: the export's run and summary (summary recomputed when none was stored).

    Raises:
        NotFoundError: when ``ref`` names no run.
    """
    from tailscope.metrics.server import summarize_server
    from tailscope.metrics.summary import summarize

    stored = store.get_run(ref)
    records = store.load_records(stored.run.id)
    samples = store.load_samples(stored.run.id)
    summary: dict[str, Any]
    if stored.summary is not None:
        summary = stored.summary
    else:  # a run still going, or one that crashed before it was summarised
        summary = summarize(records).to_dict()
        summary["server"] = summarize_server(samples)
    return ReportRun(run_to_json(stored.run), clean_json(summary), records, samples, stored.tags)


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


def _matches(text: str, *fields: Any) -> bool:
    needle = text.lower()
    return any(needle in str(f).lower() for f in fields if f)


class Dashboard:
    """The dashboard's handlers over one store (opened read-only per request)."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    async def runs(self, request: web.Request) -> web.Response:
        kind = request.query.get("kind") or None
        tag = request.query.get("tag") or None
        text = request.query.get("q", "").strip()

        def build() -> str:
            stored = self.store.list_runs(limit=LIST_LIMIT, kind=kind, tag=tag)
            rows = []
            for s in stored:
                r = s.run
                if text and not _matches(text, r.id, r.target.url, r.target.model, r.profile, r.sweep_id, *s.tags):
                    continue
                rows.append({"run": r, "tags": s.tags, "summary": s.summary or {}, "finished_at": s.finished_at})
            sets = _trace_sets(self.store)
            return str(
                _env()
                .get_template("dashboard.html.j2")
                .render(
                    rows=rows,
                    kind=kind or "",
                    tag=tag or "",
                    q=text,
                    store=str(self.store.db.path),
                    exists=self.store.db.exists,
                    limit=LIST_LIMIT,
                    trace_sets=sets,
                    lookup=lookup,
                    fmt=fmt_num,
                )
            )

        return _html(await asyncio.to_thread(build))

    async def run_page(self, request: web.Request) -> web.Response:
        ref = request.match_info["run_id"]
        item = await asyncio.to_thread(load_report_run, self.store, ref)
        return _html(await asyncio.to_thread(lambda: render_run_report(item, nav=True)))

    async def run_export(self, request: web.Request) -> web.Response:
        ref = request.match_info["run_id"]

        def build() -> dict[str, Any]:
            stored = self.store.get_run(ref)
            records: list[RequestRecord] = self.store.load_records(stored.run.id)
            return build_export(stored.run, stored.summary or {}, records)

        doc = await asyncio.to_thread(build)
        return web.Response(text=json.dumps(doc), content_type="application/json")

    async def compare(self, request: web.Request) -> web.Response:
        refs = [r for r in request.query.getall("run", []) if r]
        if len(refs) < 2:
            return web.Response(status=400, text="tailscope ui: pick two or more runs to compare (?run=A&run=B)\n")

        def build() -> str:
            items = [load_report_run(self.store, ref) for ref in refs]
            return render_compare_report(items, resamples=DASHBOARD_RESAMPLES, nav=True)

        return _html(await asyncio.to_thread(build))

    async def sweep(self, request: web.Request) -> web.Response:
        sweep_id = request.match_info["sweep_id"]

        def build() -> str:
            from tailscope.errors import NotFoundError

            ids = [s.run.id for s in self.store.list_runs(limit=10_000) if s.run.sweep_id == sweep_id]
            if len(ids) < 2:
                raise NotFoundError(f"sweep {sweep_id!r} has {len(ids)} run(s) in the store; a sweep page needs two")
            items = [load_report_run(self.store, ref) for ref in reversed(ids)]
            return render_compare_report(items, resamples=DASHBOARD_RESAMPLES, nav=True)

        return _html(await asyncio.to_thread(build))

    async def trace_set(self, request: web.Request) -> web.Response:
        from tailscope.report.html_traces import render_trace_report

        name = request.match_info["name"]
        after = request.query.get("after") or None
        html = await asyncio.to_thread(lambda: render_trace_report(self.store.db, name, after, nav=True))
        return _html(html)


def _trace_sets(store: RunStore) -> list[Any]:
    """Trace sets in the store (empty when the store has none or the trace layer is absent)."""
    if not store.db.exists:
        return []
    try:
        from tailscope.store.spans import SpanStore
    except ImportError:
        return []
    try:
        return list(SpanStore(store.db).list_sets())
    except Exception:  # a store written before spans existed has no span tables; show runs anyway
        return []


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
    dash = Dashboard(RunStore(db))
    app = web.Application(middlewares=[_guard(token, loopback_only), _errors])
    app.router.add_get("/", dash.runs)
    app.router.add_get("/runs/{run_id}", dash.run_page)
    app.router.add_get("/runs/{run_id}/export.json", dash.run_export)
    app.router.add_get("/compare", dash.compare)
    app.router.add_get("/sweeps/{sweep_id}", dash.sweep)
    app.router.add_get("/traces/{name}", dash.trace_set)
    return app
