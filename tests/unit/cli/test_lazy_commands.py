"""The command table of the lazy CLI: every command loads, and ``--help`` imports no command module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import typer

from tailscope.cli.main import COMMANDS, LazyGroup


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_loads_from_its_module(name: str) -> None:
    group = LazyGroup(name="tailscope")
    command = group.get_command(None, name)
    assert command is not None
    assert command.name == name
    module = importlib.import_module(COMMANDS[name][0])
    assert any(isinstance(v, typer.Typer) for v in vars(module).values())


def test_top_level_help_imports_no_command_module() -> None:
    code = (
        "import sys; from tailscope.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tailscope.cli.') and m not in "
        "('tailscope.cli.main',)), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip() == "[]", out.stderr
    for name in COMMANDS:
        assert name in out.stdout
