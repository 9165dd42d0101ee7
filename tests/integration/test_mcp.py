"""``tailscope mcp`` driven by the MCP SDK's own client over stdio: tools/list and bounded tool calls."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

mcp = pytest.importorskip("mcp")


async def session_run(db: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "tailscope", "mcp", "--db", str(db)])
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
