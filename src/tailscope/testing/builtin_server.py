"""The built-in engine as a separate ``tailscope serve`` process, for tests and benchmarks that need a live URL."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
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
    port; yields its URL and stops it afterwards. Should the block raise (a test failing against the server), the
    server's standard error is printed to ours, so the failure shows what the server said (a failed engine loop's
    traceback, say)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "tailscope", "serve", "--port", str(port), "--speed", str(speed)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    argv += list(extra_args)
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below, after the child has ended)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
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
    except BaseException:
        state = "still running" if proc.poll() is None else f"ended with exit code {proc.returncode}"
        log.seek(0)
        said = log.read()[-4000:].decode(errors="replace").strip() or "(nothing)"
        print(f"tailscope serve at {url} ({state}) wrote to its standard error:\n{said}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
