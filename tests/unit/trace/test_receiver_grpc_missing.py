"""trace collect --grpc-port without grpcio: one line saying what to install, before anything listens."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tailscope.errors import ConfigError
from tailscope.trace.receiver import OtlpReceiver


def test_grpc_port_without_grpcio_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # an import of grpc now fails, installed or not
    rx = OtlpReceiver(lambda batch: None, port=0, grpc_port=0)
    with pytest.raises(ConfigError, match=r"tailscope\[grpc\]"):
        asyncio.run(rx.start())
    assert rx._runner is None  # the HTTP side never started
