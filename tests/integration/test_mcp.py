"""``tailscope mcp`` driven by the MCP SDK's own client over stdio: tools/list and bounded tool calls."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

mcp = pytest.importorskip("mcp")


async def session_run(db: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    # the server gets this process's environment (the SDK passes only a few variables by default): the same sources
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tailscope", "mcp", "--db", str(db)], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        results = [await session.call_tool(name, args) for name, args in calls]
    return [t.name for t in tools.tools], results


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(json.loads(result.content[0].text))


def error_text(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)


def test_tools_list_and_a_bounded_bench(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    names, results = asyncio.run(
        asyncio.wait_for(
            session_run(
                db,
                [
                    ("bench", {"requests": 6, "concurrency": 2, "input_tokens": "64", "output_tokens": "8"}),
                    ("runs_show", {"run": "latest"}),
                    ("runs_list", {}),
                    ("bench", {"concurrency": 2}),  # unbounded
                    ("bench", {"requests": 2, "url": "http://192.0.2.1:8000"}),  # not this machine
                    ("bench", {"requests": 10**9}),  # over the limit
                ],
            ),
            timeout=180,
        )
    )
    assert {"bench", "runs_list", "runs_show"} <= set(names)
    run = payload(results[0])
    assert run["summary"]["requests"]["completed"] == 6
    assert run["summary"]["ttft_ms"]["p50"] > 0
    assert "requests" not in run  # bounded: no per-request records in the answer
    shown = payload(results[1])
    assert shown["run"]["id"] == run["run"]["id"]
    assert payload(results[2])["runs"][0]["id"] == run["run"]["id"]
    assert "bounded" in error_text(results[3])
    assert "loopback" in error_text(results[4])
    assert "requests" in error_text(results[5])


def test_sim_plan_trace_and_gate_tools(tmp_path: Path) -> None:
    """The predict, plan, locate and verify tools over the same API: bounded, JSON, errors as one line."""
    import tailscope

    before, _ = tailscope.write_demo_traces(tmp_path / "demo", traces=60)
    db = tmp_path / "runs.duckdb"
    contract = {
        "slo": [{"metric": "ttft_ms", "percentile": "p99", "max": 60_000}, {"metric": "error_rate", "max": 0.01}]
    }
    _, results = asyncio.run(
        asyncio.wait_for(
            session_run(
                db,
                [
                    ("sim", {"requests": 200, "rate": 5, "input_tokens": "256", "output_tokens": "32"}),
                    ("gate", {"contract": contract, "run": "latest"}),
                    (
                        "plan_estimate",
                        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "input_tokens": 500, "output_tokens": 100},
                    ),
                    (
                        "plan_capacity",
                        {
                            "model": "llama-3.1-8b",
                            "gpu": "h100-sxm",
                            "target_rps": 5,
                            "slo": ["ttft_p99=2s"],
                            "tp": [1],
                            "sim_requests": 300,
                        },
                    ),
                    ("trace_analyze", {"source": str(before)}),
                    ("sim", {"rate": 5}),  # unbounded
                    (
                        "plan_capacity",
                        {
                            "model": "llama-3.1-8b",
                            "gpu": "h100-sxm",
                            "target_rps": 5,
                            "slo": [],
                            "max_replicas": 10_000,
                        },
                    ),
                    ("gate", {"contract": {"slo": [{"metric": "ttft_ms", "max": 1}]}}),  # no percentile
                    (
                        "sim",
                        {
                            "requests": 64,
                            "concurrency": 16,
                            "model": "deepseek-r1",
                            "gpu": "b200",
                            "weights_dtype": "fp8",
                            "tp": 1,
                            "attention_dp": 8,
                            "ep": 8,
                            "engine": "sglang",
                        },
                    ),
                ],
            ),
            timeout=180,
        )
    )
    sim = payload(results[0])
    assert sim["summary"]["requests"]["completed"] == 200
    assert sim["summary"]["sim"]["steps"] > 0
    assert "timeline" not in sim["summary"]["sim"]
    assert "requests" not in sim  # no per-request records
    gate = payload(results[1])
    assert gate["verdict"] == "pass"
    assert gate["run"] == sim["run"]["id"]  # the sim run, found in the store
    est = payload(results[2])
    assert est["ttft_ms"] > 0
    assert est["tpot_ms"] > 0
    cap = payload(results[3])
    assert cap["best"]["check"]["passed"] is True
    assert cap["best"]["tp"] == 1
    moe = payload(results[8])  # an MoE model as it is deployed: eight attention-DP ranks, its experts over them
    assert moe["summary"]["requests"]["completed"] == 64
    assert moe["run"]["target"] == "sim://deepseek-r1@b200x8/dp8"  # one replica of eight GPUs, eight ranks
    analysis = payload(results[4])
    assert analysis["traces"]["count"] == 60
    assert analysis["layers"]["tail_bucket"]["composition"]
    assert "bounded" in error_text(results[5])
    assert "max_replicas" in error_text(results[6])
    assert "percentile" in error_text(results[7])


def test_diagnose_and_whatif_tools(tmp_path: Path) -> None:
    """The fix-planning tools: diagnose a stored run, project a change over a trace file, rank fixes."""
    import tailscope

    before, _ = tailscope.write_demo_traces(tmp_path / "demo", traces=60)
    db = tmp_path / "runs.duckdb"
    tools, results = asyncio.run(
        asyncio.wait_for(
            session_run(
                db,
                [
                    ("sim", {"requests": 200, "rate": 5, "input_tokens": "256", "output_tokens": "32"}),
                    ("diagnose", {"run": "latest"}),
                    ("trace_whatif", {"source": str(before), "scale": ["execute_tool search_kb=0.5"]}),
                    ("trace_whatif", {"source": str(before), "scale": ["nonsense"]}),
                ],
            ),
            timeout=180,
        )
    )
    assert {"diagnose", "trace_whatif", "trace_join"} <= set(tools)
    diag = payload(results[1])
    assert "findings" in diag
    whatif = payload(results[2])
    assert whatif["after"]["p95_ms"] <= whatif["before"]["p95_ms"]
    assert "scale" in error_text(results[3]) or "=" in error_text(results[3])


def test_whatif_tool_class_attribute(tmp_path: Path) -> None:
    """``trace_whatif``'s ``class_attribute``: the default reads tailscope.request.class, another attribute is read
    when named, "" turns the breakdown off; ranked fixes carry their P95 saving per class; an unknown operation is
    listed with close names, and a what-if naming none of the set's operations fails saying so."""
    from tailscope.records import Span
    from tailscope.trace.demo import to_otlp_json

    ms = 1_000_000
    spans = []
    for k in range(80):
        tid, klass = f"{k:032x}", ("chat" if k % 2 else "rag")
        t = 0
        if klass == "rag":
            spans.append(Span(tid, f"{k:08x}0001", f"{k:08x}0000", "search", 0, (40 + k) * ms))
            t = (40 + k) * ms
        spans.append(Span(tid, f"{k:08x}0002", f"{k:08x}0000", "llm", t, t + (100 + 2 * k) * ms))
        t += (100 + 2 * k) * ms
        attrs = {"tailscope.request.class": klass, "app.tier": "free" if k < 40 else "paid"}
        spans.append(Span(tid, f"{k:08x}0000", None, "POST /chat", 0, t + ms, attributes=attrs))
    src = tmp_path / "classed.otlp.json"
    src.write_text(json.dumps(to_otlp_json(spans)))
    base = {"source": str(src), "scale": ["search=0.5"]}
    _, results = asyncio.run(
        asyncio.wait_for(
            session_run(
                tmp_path / "runs.duckdb",
                [
                    ("trace_whatif", base),
                    ("trace_whatif", {**base, "class_attribute": "app.tier"}),
                    ("trace_whatif", {**base, "class_attribute": ""}),
                    ("trace_whatif", {"source": str(src), "rank": True}),
                    ("trace_whatif", {"source": str(src), "scale": ["search=0.5", "serch=0.5"]}),
                    ("trace_whatif", {"source": str(src), "scale": ["serch=0.5"]}),
                    ("trace_whatif", {**base, "root_op": "post /chat"}),
                    ("trace_whatif", {**base, "independent": ["search,llm,lm"], "parallel_children": ["POST /chat"]}),
                    ("trace_whatif", {**base, "independent": ["serch,lm"]}),
                    ("trace_whatif", {**base, "root_op": "POST /chat", "cap_retries": ["llm=1"]}),
                ],
            ),
            timeout=180,
        )
    )
    by_class = payload(results[0])
    assert by_class["class_attribute"] == "tailscope.request.class"
    assert by_class["classes"]["chat"]["saving"]["p95_ms"] == 0
    assert by_class["classes"]["rag"]["saving"]["p95_ms"] > 0
    tier = payload(results[1])
    assert set(tier["classes"]) == {"free", "paid"}
    off = payload(results[2])
    assert off["class_attribute"] is None
    assert "classes" not in off
    ranked = payload(results[3])
    search = [c for c in ranked["candidates"] if c["operations"] == ["search"]]
    assert search
    assert all(c["classes"]["chat"]["p95_saving_ms"] == 0 < c["classes"]["rag"]["p95_saving_ms"] for c in search)
    partly = payload(results[4])
    assert [u["operation"] for u in partly["unmatched"]] == ["serch"]
    assert "search" in partly["unmatched"][0]["close"]
    assert "did you mean 'search'" in error_text(results[5])
    # operations of --root-op and --independent are checked the same way
    assert '--root-op "post /chat"' in error_text(results[6])
    assert "did you mean 'POST /chat'" in error_text(results[6])
    group = payload(results[7])
    assert [(u["flag"], u["operation"]) for u in group["unmatched"]] == [('--independent "search,llm,lm"', "lm")]
    assert "did you mean 'llm'" in " ".join(group["warnings"])
    assert "no --independent group names two operations" in error_text(results[8])
    rooted = payload(results[9])
    assert rooted["traces"] == by_class["traces"]
    assert rooted["changes"][-1]["kind"] == "cap-retries"
