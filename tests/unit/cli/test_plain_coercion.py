"""The plain coercion of every command's options (``tailscope sim``'s in depth) gives typer's own answers (values and
errors)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.cli import plain_coercion as pc
from tailscope.cli.sim import app

_coercion = pytest.importorskip("typer._coercion")  # typer ≥ 0.20 coerces through pydantic; older: nothing to check


def _params() -> dict[str, Any]:
    return {p.name: p for p in typer.main.get_command(app).params}


def _typer_answer(p: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", _coercion.build_runtime_param(p.type_descriptor).coerce(value, param=p, ctx=None)
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc))


def _plain_answer(p: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", pc._PlainCoercion(p.type_descriptor).coerce(value, param=p, ctx=None)
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc))


def _same(p: Any, value: Any) -> None:
    mine, theirs = _plain_answer(p, value), _typer_answer(p, value)
    if mine[0] == theirs[0] == "ok" and isinstance(mine[1], float) and math.isnan(mine[1]):
        assert isinstance(theirs[1], float)  # "nan" reads as NaN both ways, and NaN != NaN
        assert math.isnan(theirs[1])
        return
    assert mine == theirs
    if mine[0] == "ok":
        assert type(mine[1]) is type(theirs[1])


_NUMBERISH = st.one_of(
    st.from_regex(r"-?[0-9]{1,20}(\.[0-9]{0,20})?([eE][-+]?[0-9]{1,3})?", fullmatch=True),
    st.text(alphabet="0123456789.-+eE_ infa", max_size=12),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=False).map(repr),
)


@settings(max_examples=300, deadline=None)
@given(_NUMBERISH)
def test_numbers_as_typer_coerces_them(text: str) -> None:
    ps = _params()
    for name in ("requests", "seed", "tp", "rate", "gpu_memory_utilization", "duration"):
        _same(ps[name], text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_strings_as_typer_coerces_them(text: str) -> None:
    ps = _params()
    for name in ("model", "input_tokens", "disagg"):
        _same(ps[name], text)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("requests", None), ("requests", 10), ("rate", 0.5), ("rate", 3), ("rate", None), ("slo", []), ("slo", ()),
        ("slo", ("ttft_p99=1s", "tpot_p99=50ms")), ("slo", None), ("quiet", True), ("model", "llama-3.1-8b"),
        ("db", "run.duckdb"), ("db", "-"), ("db", "."), ("db", ""), ("json_out", "/tmp"), ("calibration", None),
    ],
)  # fmt: skip
def test_values_as_typer_coerces_them(name: str, value: Any) -> None:
    _same(_params()[name], value)


def test_path_values_are_paths(tmp_path: Path) -> None:
    _same(_params()["db"], str(tmp_path / "t.duckdb"))
    assert _plain_answer(_params()["db"], str(tmp_path)) == ("ok", tmp_path)


def test_sim_parses_without_pydantic(tmp_path: Path) -> None:
    """A fresh `tailscope sim` imports no pydantic (what the plain coercion is for); a bad value's error is typer's."""
    code = (
        "import sys\n"
        "from tailscope.cli.main import main\n"
        f"sys.argv = ['tailscope', 'sim', '--requests', '3', '--rate', '5', '-q', '--db', {str(tmp_path / 't')!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"
    bad = subprocess.run(
        [sys.executable, "-m", "tailscope", "sim", "--rate", "fast"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "Invalid value for '--rate'" in bad.stderr
    assert "Input should be a valid number" in bad.stderr


def _leaf_commands() -> list[Any]:
    from tailscope.cli.main import COMMANDS
    from tailscope.cli.main import app as root

    group: Any = typer.main.get_command(root)
    found, todo = [], [group.get_command(typer.Context(group), name) for name in COMMANDS]
    while todo:
        cmd = todo.pop()
        if hasattr(cmd, "commands"):
            todo.extend(cmd.commands.values())
        else:
            found.append(cmd)
    return found


def test_every_command_uses_the_plain_coercion() -> None:
    for cmd in _leaf_commands():
        assert isinstance(cmd, pc.PlainCommand), cmd.name


@pytest.mark.parametrize("value", [None, "1", "-3", "2.5", "x", "", "a,b", ".", ("p", "q"), 7, 0.5, True])
def test_every_commands_options_as_typer_coerces_them(value: Any) -> None:
    for cmd in _leaf_commands():
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                _same(p, value)
