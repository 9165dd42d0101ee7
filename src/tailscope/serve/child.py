"""The built-in server as a child process, so its CPU work never shares an interpreter (GIL) with the caller.

``tailscope bench`` measures token timings with its own event loop; a server thread in the same process competes
for the GIL and bunches tokens together at higher load (measured: 64 streams, client-seen ITL p95 28 ms in a thread
against 16 ms in a child process for 9.7 ms engine steps). The child is ``python -m tailscope serve --port 0`` in
its own session (a terminal Ctrl-C reaches only the parent, which drains and then stops the child) that exits when
its standard input closes, so it never outlives its parent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import tailscope
from tailscope.errors import ConfigError, TargetError
from tailscope.serve.engine_factory import EngineFlags
from tailscope.serve.faults import FaultConfig

_READY = re.compile(r"at (http://\S+?)/v1 ")


#: ``tailscope serve``'s flag of each :class:`EngineFlags` field it is passed by (``tp``, ``kv_dtype`` and
#: ``gpu_memory_utilization`` always; ``enable_prefix_caching`` as ``--no-prefix-caching``): a child server runs the
#: settings the parent validated and describes (tests/unit/serve/test_child_args.py holds every field to a flag)
_FLAG_OF = {
    "weights_dtype": "--weights-dtype",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "calibration": "--calibration",
    "gpu_file": "--gpu-file",
    "disagg": "--disagg",
    "attention_dp": "--attention-dp",
    "backend": "--engine",
    "ep": "--ep",
    "kv_offload_gib": "--kv-offload-gib",
    "spec_draft": "--spec-draft",
    "spec_accept": "--spec-accept",
    "spec_draft_model": "--spec-draft-model",
    "batch_wait_iters": "--batch-wait-iters",
    "batch_wait_ratio": "--batch-wait-ratio",
    "recv_interval": "--scheduler-recv-interval",
    "dp_balance_iters": "--attention-dp-balance-iters",
}


def serve_cli_args(
    model: str,
    gpu: str,
    flags: EngineFlags,
    *,
    served_model_name: str | None = None,
    speed: float = 1.0,
    seed: int = 0,
    faults: FaultConfig | None = None,
    frontend_latency: bool = True,
) -> list[str]:
    """``tailscope serve`` arguments that build the same server as :func:`build_replica` with these settings."""
    args = ["serve", "--model", model, "--gpu", gpu, "--port", "0", "--speed", repr(speed), "--seed", str(seed)]
    if served_model_name:
        args += ["--served-model-name", served_model_name]
    args += ["--tp", str(flags.tp), "--kv-dtype", flags.kv_dtype]
    args += ["--gpu-memory-utilization", repr(flags.gpu_memory_utilization)]
    unset = EngineFlags()
    for name, flag in _FLAG_OF.items():  # every other setting, where it is not the default
        value = getattr(flags, name)
        if value is not None and value != getattr(unset, name):
            args += [flag, repr(value) if isinstance(value, float) else str(value)]
    if not flags.enable_prefix_caching:
        args.append("--no-prefix-caching")
    if not frontend_latency:
        args.append("--no-frontend-latency")
    f = faults or FaultConfig()
    defaults = FaultConfig()
    for name, flag in (
        ("fail_rate", "--fail-rate"),
        ("rate_limit_rate", "--rate-limit-rate"),
        ("retry_after_s", "--retry-after"),
        ("stall_prob", "--stall-prob"),
        ("stall_ms", "--stall-ms"),
        ("disconnect_prob", "--disconnect-prob"),
        ("malformed_rate", "--malformed-rate"),
    ):
        value = getattr(f, name)
        if value != getattr(defaults, name):
            args += [flag, repr(value)]
    if f.any and f.seed != seed:
        raise ConfigError(
            f"faults.seed ({f.seed}) must equal the server seed ({seed}): a child server seeds faults with --seed"
        )
    return args


class StartStop:
    """A server that ``with`` starts and stops: subclasses define :meth:`start` (returns the base URL) and
    :meth:`stop`."""

    def start(self) -> str:
        """Start the server and return its base URL once it listens."""
        raise NotImplementedError

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server, waiting up to ``timeout_s`` seconds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ChildServer(StartStop):
    """``tailscope serve`` in a child process; same surface as :class:`~tailscope.serve.embedded.EmbeddedServer`.

    Args:
        serve_args: arguments after ``tailscope`` (see :func:`serve_cli_args`).
        description: the one-line description to report.
        model_name: the served model name.
        start_timeout_s: how long :meth:`start` waits for the child to listen.
    """

    def __init__(
        self, serve_args: list[str], *, description: str, model_name: str, start_timeout_s: float = 60.0
    ) -> None:
        self.serve_args = [*serve_args, "--exit-on-stdin-eof"]
        self.description = description
        self.model_name = model_name
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running child."""
        if self._base_url is None:
            raise RuntimeError("the child server is not started")
        return self._base_url

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            lines = [line for line in self._stderr.read().splitlines() if line.strip()]
            return lines[-1] if lines else ""
        return ""

    def start(self) -> str:
        """Start the child and wait until it listens; returns :attr:`base_url`.

        Raises:
            TargetError: when the child exits or does not listen in time (with its last error line).
        """
        if self._proc is not None:
            return self.base_url
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 (closed in stop())
        # the child imports the same tailscope as this process, installed or not
        package_root = str(Path(tailscope.__file__).resolve().parent.parent)
        python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": python_path}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tailscope", *self.serve_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            start_new_session=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        stdout = self._proc.stdout
        assert stdout is not None

        def pump() -> None:  # keeps draining stdout so the child never blocks on a full pipe
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="tailscope-serve-child-stdout", daemon=True).start()
        deadline = time.monotonic() + self._start_timeout_s
        while self._base_url is None:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise TargetError(f"the built-in server did not start within {self._start_timeout_s:.0f} s") from None
            if line is None:
                self._proc.wait(5)
                detail = self._stderr_tail()
                code = self._proc.returncode
                self.stop()
                raise TargetError(f"the built-in server exited at start (code {code}): {detail}")
            m = _READY.search(line)
            if m:
                self._base_url = m.group(1)
        return self._base_url

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the child to stop (SIGINT, then close its stdin), wait, and kill it if it does not exit."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGINT)
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._proc = None

    @property
    def pid(self) -> int | None:
        """Process id of the child while it runs."""
        return self._proc.pid if self._proc is not None else None


def flags_from(options: dict[str, Any]) -> tuple[EngineFlags, dict[str, Any]]:
    """Split keyword options into :class:`EngineFlags` fields and the rest."""
    names = {f.name for f in dataclasses.fields(EngineFlags)}
    engine = {k: v for k, v in options.items() if k in names}
    rest = {k: v for k, v in options.items() if k not in names}
    return EngineFlags(**engine), rest
