"""Dashboard helpers: which hosts count as loopback, how a Host header is read."""

from __future__ import annotations

import pytest

from tailscope.ui.dashboard import _host_only, is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1:8787", "127.0.0.1"),
        ("localhost", "localhost"),
        ("[::1]:8787", "::1"),
        ("evil.example:80", "evil.example"),
    ],
)
def test_host_only(header: str, host: str) -> None:
    assert _host_only(header) == host
