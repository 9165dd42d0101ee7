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

import asyncio
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
#: upper bounds of a simulation (virtual time is cheap, but an answer must come back within a tool call)
SIM_LIMITS: dict[str, float] = {"requests": 200_000, "duration_s": 86_400.0, "concurrency": 4_096, "rate": 10_000.0}
#: most entries of any list or mapping in an analysis answer (the rest are counted, not sent)
MAX_ITEMS = 50


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


def _bounded(
    requests: int | None,
    duration_s: float | None,
    concurrency: int | None,
    rate: float | None,
    limits: dict[str, float] = LIMITS,
) -> None:
    if requests is None and duration_s is None:
        raise ConfigError("give requests or duration_s: every load run is bounded")
    checks = (
        ("requests", requests, limits["requests"]),
        ("duration_s", duration_s, limits["duration_s"]),
        ("concurrency", concurrency, limits["concurrency"]),
        ("rate", rate, limits["rate"]),
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


def trimmed(doc: dict[str, Any], limit: int = MAX_ITEMS) -> dict[str, Any]:
    """``doc`` with every list and mapping cut to its first ``limit`` entries; ``truncated`` says what was cut."""
    cut: list[str] = []

    def trim(obj: Any, path: str) -> Any:
        if isinstance(obj, dict):
            if len(obj) > limit:
                cut.append(f"{path}: {len(obj)} entries, the first {limit} kept")
            return {k: trim(v, f"{path}.{k}") for k, v in list(obj.items())[:limit]}
        if isinstance(obj, list | tuple):
            if len(obj) > limit:
                cut.append(f"{path}: {len(obj)} items, the first {limit} kept")
            return [trim(v, f"{path}[{i}]") for i, v in enumerate(obj[:limit])]
        return obj

    out: dict[str, Any] = trim(doc, "$")
    if cut:
        out["truncated"] = cut
    return out


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
            "predict with sim and plan_estimate/plan_capacity, locate the tail with trace_analyze, read runs with "
            "runs_list/runs_show, check them with gate. Every answer is JSON."
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

    async def sim(
        requests: int | None = None,
        duration_s: float | None = None,
        model: str = "llama-3.1-8b",
        gpu: str = "h100-sxm",
        tp: int = 1,
        replicas: int = 1,
        engine: str = "vllm",
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: str = "poisson",
        input_tokens: str = "256",
        output_tokens: str = "128",
        weights_dtype: str | None = None,
        kv_dtype: str = "bf16",
        slo: list[str] | None = None,
        seed: int = 0,
        stagger: float | None = None,
        ep: int = 1,
        attention_dp: int = 1,
        disagg: str | None = None,
    ) -> dict[str, Any]:
        """Simulate a deployment (catalog model and GPU, TP, replicas, engine vllm/sglang/trtllm; for an MoE model ep
        and attention_dp ranks, e.g. tp=1 attention_dp=8 ep=8; disagg="prefill=1x8:dp8:ep8,decode=1x8:dp8:ep8" for
        prefill/decode pools) under a workload
        in virtual time, no GPU needed, and return the run id and its summary (the same figures as bench) with the
        simulator's (engine steps, preemptions, GPU-hours). Bounded: requests or duration_s (virtual seconds) is
        required. The run is kept in the store (see runs_show, gate). A closed loop's clients start over one
        request's lifetime; stagger=0 starts them together, as bench does (to predict a bench's closed loop)."""
        _bounded(requests, duration_s, concurrency, rate, SIM_LIMITS)
        result = await asyncio.to_thread(
            tailscope.simulate,
            model=model, gpu=gpu, tp=tp, replicas=replicas, engine=engine, concurrency=concurrency, rate=rate,
            arrival=arrival, requests=requests, duration=duration_s, input_tokens=input_tokens,
            output_tokens=output_tokens, weights_dtype=weights_dtype, kv_dtype=kv_dtype, slo=tuple(slo or ()),
            seed=seed, stagger=stagger, ep=ep, attention_dp=attention_dp, disagg=disagg, store=store(),
        )  # fmt: skip
        doc = _summary_doc(result)
        figures = result.sim.to_dict()
        figures.pop("timeline", None)  # bounded: the timeline is in the store's server samples
        figures["scale_events"] = figures["scale_events"][:MAX_ITEMS]
        doc["summary"]["sim"] = tailscope_clean(figures)
        return doc

    async def plan_estimate(
        model: str,
        gpu: str,
        input_tokens: int,
        output_tokens: int,
        concurrency: int = 1,
        tp: int = 1,
        weights_dtype: str | None = None,
        kv_dtype: str = "bf16",
        engine: str = "vllm",
        ep: int = 1,
        attention_dp: int = 1,
    ) -> dict[str, Any]:
        """Analytic request times of a model on a GPU at a steady concurrency: prefill, TTFT, TPOT, E2E (ms), the
        roofline regime bounding each phase, replica throughput, and the assumptions behind them. engine: vllm,
        sglang or trtllm; ep: an MoE model's expert parallelism; attention_dp: attention-DP ranks of tp GPUs each."""
        e = tailscope.plan_estimate(
            model, gpu, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency, tp=tp,
            weights_dtype=weights_dtype, kv_dtype=kv_dtype, engine=engine, ep=ep, attention_dp=attention_dp,
        )  # fmt: skip
        return tailscope_clean(e.to_dict())

    async def plan_capacity(
        model: str,
        gpu: str,
        target_rps: float,
        slo: list[str],
        input_tokens: str = "512",
        output_tokens: str = "256",
        headroom: float = 0.2,
        tp: list[int] | None = None,
        max_replicas: int = 16,
        gpu_price: float | None = None,
        engine: str = "vllm",
        sim_requests: int = 1000,
    ) -> dict[str, Any]:
        """The cheapest configuration (replica shape × replicas: TP degree, or for an MoE model also that many
        attention-DP ranks, "DP4") of a model on a GPU that meets the SLOs (like ttft_p99=1.5s) at target_rps ×
        (1 + headroom), each answer re-checked by simulation. Bounded: max_replicas ≤ 64, sim_requests ≤ 5,000,
        tp degrees from 1, 2, 4, 8."""
        if not 1 <= max_replicas <= 64:
            raise ConfigError(f"max_replicas {max_replicas}: this server allows 1 to 64")
        if not 100 <= sim_requests <= 5_000:
            raise ConfigError(f"sim_requests {sim_requests}: this server allows 100 to 5,000")
        degrees = tp or [1, 2, 4, 8]
        if len(degrees) > 4 or any(d not in (1, 2, 4, 8) for d in degrees):
            raise ConfigError(f"tp {degrees}: this server allows degrees from 1, 2, 4, 8")
        result = await asyncio.to_thread(
            tailscope.plan_capacity,
            model, gpu, target_rps=target_rps, slo=tuple(slo), input_tokens=input_tokens,
            output_tokens=output_tokens, headroom=headroom, tp=degrees, max_replicas=max_replicas,
            gpu_price=gpu_price, engine=engine, sim_requests=sim_requests,
            max_sim_requests=5_000,  # the bound this server states (beyond: one replica's share, or transient only)
        )  # fmt: skip
        return tailscope_clean(result.to_dict())

    async def trace_analyze(source: str, root_op: str | None = None, policy: str = "default") -> dict[str, Any]:
        """Where the time of slow traces goes: a trace file on this machine (OTLP JSON/protobuf, Jaeger, Zipkin;
        parsed in memory) or a trace set in the store. Critical-path time by layer in the median, p95 and p99
        buckets, per-root-operation percentiles, the operations on the tail's critical path, sequential calls that
        could run together (waterfalls), retries. Lists are cut to their first 50 entries."""
        analysis = await asyncio.to_thread(
            tailscope.analyze_traces, source, root_op=root_op, policy=policy, store=settings.store
        )
        return tailscope_clean(trimmed(analysis.to_dict()))

    async def gate(
        contract: dict[str, Any] | str,
        run: str = "latest",
        baseline: str | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Check a stored run (latest, an id or prefix, latest:TAG) against a performance contract — an object like
        {"slo": [{"metric": "ttft_ms", "percentile": "p99", "max": 1500}]} or a contract file's path — and return
        the verdict (pass, fail, inconclusive, missing), each check's observed value and limit, and the exit code
        tailscope gate would give (0 pass, 1 fail, 2 missing data)."""
        result = await asyncio.to_thread(tailscope.gate, contract, run, baseline=baseline, store=store(), strict=strict)
        return tailscope_clean(result.to_dict())

    async def diagnose(run: str = "latest", traces: str | None = None) -> dict[str, Any]:
        """Turn a stored run's numbers into findings — symptom, evidence, cause, actions, highest impact first — and
        walk the method's troubleshooting trees (TTFT high, TPOT high, stuttering, OOM, P99 ≫ P50, throughput
        ceiling, smaller model slower, cost spike) on it; ``traces`` (a stored trace set) adds the layers of the
        critical path."""
        result = await asyncio.to_thread(tailscope.diagnose, run, traces=traces, store=store())
        return tailscope_clean(trimmed(result.to_dict()))

    async def trace_whatif(
        source: str,
        set_duration: list[str] | None = None,
        scale: list[str] | None = None,
        parallel: list[str] | None = None,
        cache: list[str] | None = None,
        remove: list[str] | None = None,
        parallel_children: list[str] | None = None,
        cap_retries: list[str] | None = None,
        timeout: list[str] | None = None,  # noqa: ASYNC109 - the --timeout change's values, not a deadline
        independent: list[str] | None = None,
        root_op: str | None = None,
        rank: bool = False,
        class_attribute: str = "tailscope.request.class",
    ) -> dict[str, Any]:
        """Project a fix over a trace set (stored, by name) or a trace file before making it: every trace re-timed
        along its tree under the changes — ``set_duration`` ["auth=30ms"], ``scale`` ["llm=0.6"], ``parallel``
        ["search a,search b"], ``cache`` ["kb=0.4:2ms"] (hit rate:hit duration), ``remove`` ["audit"],
        ``parallel_children`` ["agent"], ``cap_retries`` ["llm=1"], ``timeout`` ["kb=3s:200ms"] — and the
        p50/p95/p99 before and after with bootstrap intervals; ``independent`` ["search a,search b"] declares calls
        independent whatever the data says; ``root_op`` keeps only traces with that root operation (e.g. "POST
        /chat"); ``rank`` proposes fixes from the set's findings,
        ordered by P95 saving, each with the evidence that its calls are independent. ``class_attribute`` is the
        span attribute naming a trace's class (default tailscope.request.class; "" = no breakdown): when traces
        carry it, ``classes`` gives each class before and after, and each ranked fix its P95 saving per class.
        A change or ``independent`` operation naming an operation no span has is listed in ``unmatched`` with close
        names; when no change names any, no ``independent`` group names two, or ``root_op`` names none, the call
        fails saying so (with the close names)."""
        result = await asyncio.to_thread(
            tailscope.whatif, source, set_duration=set_duration or (), scale=scale or (),
            parallel=parallel or (), cache=cache or (), remove=remove or (),
            parallel_children=parallel_children or (), cap_retries=cap_retries or (), timeout=timeout or (),
            independent=independent or (), root_op=root_op, rank=rank,
            class_attribute=class_attribute or None, store=settings.store,
        )  # fmt: skip
        return tailscope_clean(trimmed(result.to_dict()))

    async def trace_join(run: str, set_name: str) -> dict[str, Any]:
        """Take each request of a bench run made with trace context apart: join it with a stored trace set by trace
        id and split its client-seen TTFT and E2E into client, network, the tree's layers, engine queue, prefill,
        decode and unexplained (parts that add up exactly); the parts' p50/p95/p99 and what explains the P99."""
        result = await asyncio.to_thread(
            tailscope.join_traces, run, set_name, store=store(), trace_store=settings.store
        )
        doc = result.to_dict()
        doc.pop("per_request", None)  # one row per request: too long for a tool answer
        return tailscope_clean(trimmed(doc))

    for fn in (bench, sim, plan_estimate, plan_capacity, trace_analyze, trace_whatif, trace_join, gate, diagnose,
               runs_list, runs_show):  # fmt: skip
        tool(fn)
    return server


def serve_stdio(settings: McpSettings | None = None) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(settings).run("stdio")
