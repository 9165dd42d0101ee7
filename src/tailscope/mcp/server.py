"""``tailscope mcp``: the library as Model Context Protocol tools, so an agent can drive measure → locate → plan →
verify.

A second front end beside the CLI, on the same public API (:mod:`tailscope`). Every tool is bounded — a bench needs
``requests`` or ``duration`` and stays under :data:`LIMITS`; the target must be on this machine's loopback unless the
server was started with ``allow_remote=True`` — and answers a machine-readable JSON object of bounded size: summaries
and run ids, never per-request records (those stay in the store, where ``runs_show`` and ``gate`` find them). A
:class:`~tailscope.errors.TailscopeError` becomes the tool's error text, one line, as on the command line.

Needs the optional ``mcp`` package (``pip install 'tailscope[mcp]'``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tailscope
from tailscope.errors import ConfigError, TailscopeError

#: upper bounds of what one tool call may ask for
LIMITS: dict[str, float] = {"requests": 20_000, "duration_s": 900.0, "concurrency": 1_024, "rate": 2_000.0}
#: most rows a listing returns
MAX_ROWS = 200


@dataclass(frozen=True, slots=True)
class McpSettings:
    """How the server runs.

    Attributes:
        store: the run store every tool reads and writes (the CLI's default store unless given).
        allow_remote: let ``bench`` target hosts other than this machine's loopback.
    """

    store: Path | None = None
    allow_remote: bool = False


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is a loopback address (resolving a name, e.g. ``localhost``)."""
    host = urlsplit(url).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0])).is_loopback for info in infos)


def _bounded(requests: int | None, duration_s: float | None, concurrency: int | None, rate: float | None) -> None:
    if requests is None and duration_s is None:
        raise ConfigError("give requests or duration_s: every load run is bounded")
    checks = (
        ("requests", requests, LIMITS["requests"]),
        ("duration_s", duration_s, LIMITS["duration_s"]),
        ("concurrency", concurrency, LIMITS["concurrency"]),
        ("rate", rate, LIMITS["rate"]),
    )
    for name, value, limit in checks:
        if value is not None and not 0 < value <= limit:
            raise ConfigError(f"{name} {value}: this server allows 0 < {name} ≤ {limit:g}")


def _summary_doc(result: Any) -> dict[str, Any]:
    """A run's bounded answer: id, status, target and the summary (no per-request records)."""
    doc = result.summary_dict() if hasattr(result, "summary_dict") else result.summary.to_dict()
    if len(doc.get("classes") or {}) > 20:  # bounded answers: many classes are in the store, not here
        doc["classes"] = {"omitted": len(doc["classes"])}
    run = {"id": result.run.id, "status": result.run.status.value, "target": result.run.target.url,
           "model": result.run.target.model}  # fmt: skip
    return tailscope_clean({"run": run, "summary": doc})


def tailscope_clean(doc: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe (no NaN or infinities)."""
    from tailscope.metrics.document import clean_json

    cleaned: dict[str, Any] = clean_json(doc)
    return cleaned


def build_server(settings: McpSettings | None = None) -> Any:
    """The MCP server with tailscope's tools registered (not started)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    settings = settings or McpSettings()
    server = MCPServer(
        name="tailscope",
        version=tailscope.__version__,
        instructions=(
            "Performance engineering for LLM and agent systems. Measure with bench (bounded; loopback targets), "
            "read runs with runs_list/runs_show, check them with gate. Every answer is JSON."
        ),
    )

    def store() -> Any:
        from tailscope.store.runs import RunStore

        return RunStore(settings.store)

    def tool(fn: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        """Register ``fn`` as a tool whose TailscopeErrors become the tool's error text."""
        import functools

        @functools.wraps(fn)
        async def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                return await fn(*args, **kwargs)
            except TailscopeError as exc:
                raise ToolError(str(exc)) from exc

        server.add_tool(wrapped, name=fn.__name__, description=(fn.__doc__ or "").strip())

    async def bench(
        requests: int | None = None,
        duration_s: float | None = None,
        url: str | None = None,
        model: str | None = None,
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: str | None = None,
        input_tokens: str | None = None,
        output_tokens: str | None = None,
        slo: list[str] | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Load-test an OpenAI-compatible endpoint on this machine (no url: the built-in simulated engine) and
        return the run id and its summary: TTFT/TPOT/ITL/E2E percentiles in ms, throughput, goodput, SLO verdicts,
        warnings. Bounded: requests or duration_s is required. Lengths: N, uniform:A:B, normal:M:S, lognormal:MED:SIG.
        SLOs like ttft_p99=1.5s. The run is kept in the store (see runs_show)."""
        _bounded(requests, duration_s, concurrency, rate)
        if url is not None and not settings.allow_remote and not is_loopback_url(url):
            raise ConfigError(f"url {url!r}: this server only targets this machine's loopback (127.0.0.1, ::1)")
        result = await tailscope.bench_async(
            url,
            model=model,
            requests=requests,
            duration=duration_s,
            concurrency=concurrency,
            rate=rate,
            arrival=arrival,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            slo=tuple(slo or ()),
            seed=seed,
            store=store(),
        )
        return _summary_doc(result)

    async def runs_list(limit: int = 20, kind: str | None = None, tag: str | None = None) -> dict[str, Any]:
        """The newest runs in the store with their headline numbers (id, kind, status, target, TTFT/TPOT p99,
        output tokens/s)."""
        limit = max(1, min(limit, MAX_ROWS))
        rows = []
        for r in store().list_runs(limit=limit, kind=kind, tag=tag):
            s = r.summary or {}
            rows.append(
                {
                    "id": r.run.id,
                    "kind": r.run.kind.value,
                    "status": r.run.status.value,
                    "started_at": r.run.started_at,
                    "target": r.run.target.url,
                    "model": r.run.target.model,
                    "tags": list(r.tags),
                    "completed": r.requests.completed if r.requests is not None else None,
                    "failed": r.requests.failed if r.requests is not None else None,
                    "ttft_p99_ms": (s.get("ttft_ms") or {}).get("p99"),
                    "tpot_p99_ms": (s.get("tpot_ms") or {}).get("p99"),
                    "output_tokens_per_s": s.get("output_tokens_per_s"),
                }
            )
        return tailscope_clean({"runs": rows})

    async def runs_show(run: str = "latest") -> dict[str, Any]:
        """One stored run's summary by id, unique prefix, latest or latest:TAG."""
        stored = store().get_run(run)
        return tailscope_clean(
            {
                "run": {"id": stored.run.id, "kind": stored.run.kind.value, "status": stored.run.status.value,
                        "target": stored.run.target.url, "model": stored.run.target.model,
                        "settings": stored.run.settings, "tags": list(stored.tags)},
                "summary": stored.summary,
            }
        )  # fmt: skip

    for fn in (bench, runs_list, runs_show):
        tool(fn)
    return server


def serve_stdio(settings: McpSettings | None = None) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(settings).run("stdio")
