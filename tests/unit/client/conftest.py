"""Fixtures of the client's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tailscope.client.hot import HOT, WHY, forced


@pytest.fixture(params=["compiled", "python"])
def each_hot_loop(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs twice: with the compiled hot loop (``_hot``'s ``Reader``, ``Poller``, …) and with the pure-Python
    twins; the compiled run is skipped, saying why, where it is not built."""
    if request.param == "compiled" and HOT is None:
        pytest.skip(f"the compiled hot loop is not built here: {WHY}")
    with forced(request.param):
        yield request.param
