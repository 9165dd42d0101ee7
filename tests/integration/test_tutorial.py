"""docs/tutorial.md works as written: its ``bash`` blocks run in order, in one shell, from an empty folder — the app
and a trace collector in the background, bench with trace context, trace join/analyze, the fixes, compare, gate and
a degradation drill, all at ``--time-scale 0.1`` over loopback. Ports 8080 and 4318 are replaced by free ones."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.testing import docblocks

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.beside]

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tutorial_script(text: str, app_port: int, otlp_port: int) -> str:
    blocks = [b.text for b in docblocks.blocks(text) if b.lang == "bash"]
    assert len(blocks) >= 7, "the tutorial's bash blocks"
    body = "\n".join(blocks).replace("8080", str(app_port)).replace("4318", str(otlp_port))
    # every background job is stopped whatever happens
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    script = tutorial_script(TUTORIAL.read_text(encoding="utf-8"), _free_port(), _free_port())
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TAILSCOPE_DB": str(tmp_path / ".tailscope" / "tailscope.duckdb"),
        "NO_COLOR": "1",
        # the sources under test, whatever the folder the shell runs in
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p),
    }
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    log = out.stdout + "\n--- stderr ---\n" + out.stderr
    print(log)
    assert out.returncode == 0, log[-6000:]
    assert "drill passed" in out.stdout, log[-4000:]
    assert (tmp_path / "drill.xml").exists()
    assert (tmp_path / "drill-report.html").exists()
    assert 'id="drill-timeline"' in (tmp_path / "drill-report.html").read_text(encoding="utf-8")
