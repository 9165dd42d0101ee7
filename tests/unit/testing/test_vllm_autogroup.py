"""The vLLM launcher lowers the priority of the server's whole session, not only of its processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.testing.vllm import _nice_autogroup


def test_server_session_gets_the_nice_value() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        path = Path(f"/proc/{proc.pid}/autogroup")
        if not path.exists():
            pytest.skip("this kernel has no scheduler autogroups (nothing to adjust)")
        _nice_autogroup(proc.pid, 10)
        assert path.read_text().strip().endswith("nice 10")
    finally:
        proc.kill()
        proc.wait()


def test_missing_process_is_ignored() -> None:
    _nice_autogroup(2**22 + 12345, 10)  # no such pid: nothing raised
