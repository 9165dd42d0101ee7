"""The verify core is pure: importing it pulls in no IO, UI or file-boundary library (pydantic stays at the IO edge)."""

from __future__ import annotations

import subprocess
import sys


def test_verify_core_imports_no_io_or_ui_library() -> None:
    code = (
        "import sys, tailscope.verify, tailscope.verify.layers, tailscope.verify.grafana, tailscope.verify.alerts\n"
        "print(','.join(m for m in ('aiohttp', 'duckdb', 'rich', 'typer', 'plotly', 'pydantic', 'jinja2')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ""
