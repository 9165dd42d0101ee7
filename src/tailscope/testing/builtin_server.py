"""The built-in engine as a separate ``tailscope serve`` process, for tests and benchmarks that need a live URL."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def built_in_server(
    *,
    speed: float = 50.0,
    served_model_name: str | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = 60.0,
) -> Iterator[str]:
    """``tailscope serve`` (the built-in engine, ``speed`` × real time) in a child process on a free 127.0.0.1
    port; yields its URL and stops it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "tailscope", "serve", "--port", str(port), "--speed", str(speed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += list(extra_args)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=1):  # noqa: S310 (our loopback URL)
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tailscope serve did not start at {url}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
