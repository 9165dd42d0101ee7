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


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from tailscope.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import tailscope

    code, out, _ = run_main(["--version"], capsys)
    assert code == 0
    assert out.strip() == f"tailscope {tailscope.__version__}"


def test_help_examples_are_printed_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["bench", "--help"], capsys)
    assert code == 0
    # a continued example keeps its backslash at the end of its line and its indented second line
    assert "--requests 500 \\\n        --input-tokens uniform:100:900" in out
    assert "Exit codes:" in out


def test_vllm_bench_flag_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["bench", "--request-rate", "inf", "--num-prompts", "3"], capsys)
    assert code == 1
    assert "--rate inf" in err  # the alias reached --rate (and the burst is refused before any load)
    # vLLM bench's --request-rate with --max-concurrency: a capped open loop, accepted (then the dead port fails)
    code, _, err = run_main(
        ["bench", "--url", "http://127.0.0.1:9", "--max-concurrency", "2", "--request-rate", "3", "--num-prompts", "3"],
        capsys,
    )
    assert code == 1
    assert "exclude each other" not in err
    assert "127.0.0.1:9" in err


#: command → its subcommands, each reachable as ``tailscope COMMAND SUB`` (a group with one subcommand must not
#: collapse into that subcommand: ``tailscope twin check`` once broke that way).
SUBCOMMANDS = {
    "runs": ["list", "show", "export"],
    "plan": ["kv", "estimate", "capacity", "cost", "budget"],
    "trace": ["analyze"],
    "twin": ["check"],
}


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_groups_keep_their_subcommands(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    for sub in SUBCOMMANDS[name]:
        code, out, err = run_main([name, sub, "--help"], capsys)
        assert code == 0, (name, sub, err)
        assert f"tailscope {name} {sub}" in out
