"""Every ``tailscope <command> --flag`` the docs mention (README.md and docs/*.md: command blocks, synopses, CI
workflow steps and inline `` `tailscope …` `` quotes) is a flag of that command: a renamed or removed option fails here,
not in a reader's terminal. The flags are read from the commands themselves (what ``--help`` lists)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from tailscope.cli.main import app
from tailscope.testing import docblocks

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _mentions() -> list[tuple[str, str]]:
    """(where, command line) for every ``tailscope …`` command line of the docs; a synopsis' ``[…]`` continuation
    lines are joined to the command above them."""
    out: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO)
        for block in docblocks.blocks(text):
            if block.lang == "yaml":  # a CI workflow's run: steps
                for n, line in enumerate(block.text.splitlines(), block.line + 1):
                    m = re.match(r"^\s*(?:-\s*)?(?:run:\s*)?(tailscope [a-z].*)$", line)
                    if m:
                        out.append((f"{name}:{n}", m.group(1)))
                continue
            if not docblocks.is_shell_block(block):
                continue
            for cmd in docblocks.commands(block.text, block.line + 1):
                if cmd.text.startswith("tailscope "):
                    out.append((f"{name}:{cmd.line}", cmd.text))
                elif cmd.text.startswith("[") and out and out[-1][0].startswith(f"{name}:"):
                    out[-1] = (out[-1][0], f"{out[-1][1]} {cmd.text}")
        out += [(f"{name}:{line}", cmd) for line, cmd in docblocks.inline_commands(text)]
    return out


def _command(words: list[str]) -> tuple[str, Any] | None:
    """(its name, the click command) that a command line's words name, subcommands followed; None when unknown."""
    group: Any = typer.main.get_command(app)
    ctx = typer.Context(group)
    cmd: Any = group
    path: list[str] = []
    for word in words:
        if not hasattr(cmd, "get_command") or word.startswith("-"):
            break
        sub = cmd.get_command(ctx, word)
        if sub is None:
            break
        cmd, path = sub, [*path, word]
    return (" ".join(path), cmd) if path else None


def _flags(cmd: Any) -> set[str]:
    names = {"--help"}
    for param in cmd.params:
        names.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
    return names


def test_the_docs_mention_commands() -> None:
    assert len(_mentions()) > 150


def _wrong(mentions: list[tuple[str, str]]) -> list[str]:
    wrong: list[str] = []
    for where, line in mentions:
        try:
            words = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
        except ValueError:
            words = line.split()[1:]
        found = _command(words)
        if found is None:
            if words and not words[0].startswith(("-", "…")) and "/" not in words[0]:  # not prose: gate/compare
                wrong.append(f"{where}: `tailscope {words[0]}` is not a command")
            continue
        name, cmd = found
        if hasattr(cmd, "get_command") and not any(w.startswith("--") for w in words):
            continue  # a group named on its own (`tailscope plan`)
        known = _flags(cmd)
        for flag in docblocks.flag_tokens(line):
            if flag not in known:
                wrong.append(f"{where}: `tailscope {name}` has no {flag}")
    return sorted(set(wrong))


def test_every_documented_flag_exists() -> None:
    wrong = _wrong(_mentions())
    assert not wrong, "\n".join(wrong)


def test_a_wrong_flag_or_command_is_found() -> None:
    lines = [
        ("a:1", "tailscope bench --url http://x --no-such-flag 3"),
        ("a:2", "tailscope trace analyze --set s --nope"),
        ("a:3", "tailscope benchh --url x"),
        ("a:4", "tailscope plan kv --model m [--gpuu h100-sxm]"),
    ]
    assert _wrong(lines) == [
        "a:1: `tailscope bench` has no --no-such-flag",
        "a:2: `tailscope trace analyze` has no --nope",
        "a:3: `tailscope benchh` is not a command",
        "a:4: `tailscope plan kv` has no --gpuu",
    ]


@pytest.mark.parametrize(
    ("line", "flags"),
    [
        ("tailscope bench --url http://x --slo ttft_p99=1s", ["--url", "--slo"]),
        ('tailscope translate "vllm bench serve --request-rate 10"', []),  # another tool's flags, quoted
        ("tailscope runs export RUN --format parquet|csv|json --out FILE", ["--format", "--out"]),
        ("tailscope gate c.yaml|--contract F [--run latest | --trace-only]", ["--contract", "--run", "--trace-only"]),
        ("tailscope bench --dialect=vllm", ["--dialect"]),
    ],
)
def test_flag_tokens(line: str, flags: list[str]) -> None:
    assert docblocks.flag_tokens(line) == flags


def test_every_example_file_the_docs_name_exists() -> None:
    named = {
        (page.relative_to(REPO), m.group(0).rstrip(".)"))
        for page in PAGES
        for m in re.finditer(r"(?<![\w/])examples/[\w./-]+", page.read_text(encoding="utf-8"))
    }
    assert named, "the docs name example files"
    missing = sorted(f"{page}: {path}" for page, path in named if not (REPO / path).exists())
    assert not missing, "\n".join(missing)
