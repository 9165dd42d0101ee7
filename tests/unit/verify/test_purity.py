"""The gate is pure core: importing it pulls in no IO or UI library."""

from __future__ import annotations

import subprocess
import sys


def test_gate_imports_no_io_or_ui_library() -> None:
    code = (
        "import sys, tailscope.verify, tailscope.verify.layers, tailscope.verify.grafana, tailscope.verify.render\n"
        "print(','.join(m for m in ('aiohttp', 'duckdb', 'rich', 'typer', 'plotly') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ""
