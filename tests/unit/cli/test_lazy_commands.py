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
        "('tailscope.cli.main', 'tailscope.cli.plain_coercion')), file=sys.stderr)"
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


def test_every_commands_examples_are_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 5: every command's help keeps a continued example's backslash at the end of its line (the
    re-wrapped help of sim, plan capacity, plan cost and app ran it into the next line: ``2000 \\       --input``)."""
    group = LazyGroup(name="tailscope")
    checked = 0
    for name in COMMANDS:
        for path, cmd in _walk(group.get_command(None, name), name):
            if getattr(cmd, "commands", None):
                continue
            code, out, err = run_main([*path.split(), "--help"], capsys)
            assert code == 0, (path, err)
            assert "\\ " not in out.replace("\\ \n", ""), f"tailscope {path} --help re-wrapped an example:\n{out}"
            for line in out.splitlines():
                if line.lstrip().startswith("tailscope ") and line.rstrip().endswith("\\"):
                    checked += 1
    assert checked >= 8  # the continued examples of bench, sim, plan capacity/cost/budget, …


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


def _walk(command: object, path: str) -> list[tuple[str, object]]:
    # by duck typing: typer may vendor its own click, whose classes differ from ``click``'s
    out: list[tuple[str, object]] = [(path, command)]
    for sub_name, sub in (getattr(command, "commands", None) or {}).items():
        out += _walk(sub, f"{path} {sub_name}")
    return out


def test_json_takes_a_path_in_every_command() -> None:
    """One meaning for ``--json`` (issue 26 item 5): every command's ``--json`` takes PATH (``-`` = stdout), never a
    bare flag (a flag that could also take a value would eat the next option: ``--json --db x``)."""
    group = LazyGroup(name="tailscope")
    seen = []
    for name in COMMANDS:
        for path, cmd in _walk(group.get_command(None, name), name):
            for param in getattr(cmd, "params", []):
                if "--json" in getattr(param, "opts", ()):
                    seen.append(path)
                    assert not param.is_flag, f"tailscope {path} --json is a bare flag"
    for expected in ("compare", "diagnose", "checklist", "runs show", "trace show", "trace join", "bench", "sim"):
        assert expected in seen


def test_json_dash_prints_only_the_document(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    _, out, _err = run_main(["checklist", "--db", f"{tmp_path}/none.duckdb", "--json", "-"], capsys)
    assert "items" in json.loads(out)  # stdout holds the document alone
    _code, out, _ = run_main(["checklist", "--db", f"{tmp_path}/none.duckdb", "--json", f"{tmp_path}/c.json"], capsys)
    assert "Pre-launch checklist" in out
    with open(f"{tmp_path}/c.json", encoding="utf-8") as fh:
        assert "items" in json.load(fh)


def test_the_cli_stays_thin() -> None:
    """Issue 18's house rule: the front end parses, calls the library and renders — ≤ 2,200 lines, no ``*_impl``."""
    from pathlib import Path

    import tailscope.cli

    folder = Path(tailscope.cli.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert not [m.name for m in modules if m.stem.endswith("_impl")]
    assert sum(len(m.read_text(encoding="utf-8").splitlines()) for m in modules) <= 2_200
