"""Bad command lines end in click's short usage message and exit 2, never a traceback.

typer ≥ 0.20 vendors its own click (``typer._click``) whose exceptions are not ``click.ClickException``; the entry
point must recognise both.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "--no-such-flag"], "No such option"),
        (["runs", "export", "latest"], "Missing option"),
        (["no-such-command"], "No such command"),
    ],
)
def test_usage_error_is_one_message_not_a_traceback(argv: list[str], expected: str) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "tailscope", *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 2, p.stderr
    assert expected in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
