"""Public entry points that the benchmarks and docs use instead of internals: the client's per-event cost and the
built-in server as an ``async with`` body."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest

import tailscope


def test_client_cost_measures_the_hot_path() -> None:
    cost = tailscope.client_cost(streams=2, tokens=16, repeat=1)
    assert isinstance(cost, tailscope.ClientCost)
    assert cost.us_per_event > 0
    assert (cost.events_per_pass, cost.passes, cost.usage) == (2 * 18, 1, True)


def test_client_cost_refuses_empty_passes() -> None:
    with pytest.raises(tailscope.ConfigError, match="streams must be"):
        tailscope.client_cost(streams=0)


def test_builtin_server_answers_in_the_body_and_stops() -> None:
    async def main() -> str:
        async with tailscope.start_builtin_server(isolation="thread", max_num_seqs=8) as server:
            assert "llama-3.1-8b" in server.description
            url = server.base_url
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url + "/v1/models", timeout=10).read())
            assert b"llama-3.1-8b" in body
        return url

    url = asyncio.run(main())
    with pytest.raises(urllib.error.URLError):  # stopped: the port no longer answers
        urllib.request.urlopen(url + "/v1/models", timeout=2)


def test_builtin_server_refuses_a_bad_option_before_starting() -> None:
    async def main() -> None:
        async with tailscope.start_builtin_server(no_such_option=1):
            raise AssertionError("started")

    with pytest.raises(tailscope.ConfigError, match="no_such_option"):
        asyncio.run(main())
