"""The command and code blocks of the docs (README.md, docs/*.md), as the doc tests run them.

One extractor for every doc test: fenced blocks with the ``<!-- doctest: … -->`` directives written just above them,
shell blocks split into commands (continuations joined, comments dropped, ``;``/``&&`` split, a trailing ``&`` marks a
background job, ``$ `` prompts separate commands from the output shown under them) and the ``--flag`` tokens of every
``tailscope`` command line (for the check that each flag exists).

Directives (an HTML comment on its own line right above a fence; several may follow each other):

* ``<!-- doctest: skip REASON -->`` — the block is not run (it needs vLLM, a cluster, a GPU …); the reason is required.
* ``<!-- doctest: exit N -->`` — every command of the block exits with N (a gate that fails on purpose).
* ``<!-- doctest: file NAME -->`` — the block is the content of the file NAME, written before the next blocks run.
* ``<!-- doctest: output -->`` — the output shown under each ``$`` command is what it prints (each shown line without
  ``…`` appears, whitespace and table rules aside).

In a ``$``-prompt block, ``(exit N)`` at the end of an output line is the exit code of the command above it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

__all__ = [
    "EXIT_NOTE",
    "Block",
    "Command",
    "blocks",
    "commands",
    "flag_tokens",
    "inline_commands",
    "is_shell_block",
    "runnable_form",
]

SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})

_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_DIRECTIVE = re.compile(r"^<!--\s*doctest:\s*(.*?)\s*-->\s*$")
EXIT_NOTE = re.compile(r"\(exit (\d+)\)\s*$")
#: words that stand for a value the reader fills in (the doc's synopses); ``RUN``/``RUN_ID`` become ``latest``
PLACEHOLDERS = frozenset(
    {"SET", "NAME", "TRACE_ID", "SWEEP_ID", "FILE", "PATH", "ID", "OP", "REF", "N", "R", "T", "LAYER", "HISTOGRAM"}
)


@dataclass(frozen=True)
class Block:
    """A fenced block: its first line's number (1-based, the fence) and the directives written above it."""

    line: int
    lang: str
    text: str
    directives: tuple[str, ...] = ()

    def directive(self, name: str) -> str | None:
        """The argument of the directive ``name`` ("" when it has none), or None when the block has none."""
        for d in self.directives:
            head, _, rest = d.partition(" ")
            if head == name:
                return rest.strip()
        return None


@dataclass(frozen=True)
class Command:
    """One command of a shell block: ``line`` is its doc line, ``output`` the lines shown under a ``$`` prompt."""

    line: int
    text: str
    background: bool = False
    expect: int | None = None
    output: tuple[str, ...] = field(default=())


def blocks(text: str) -> list[Block]:
    """Every fenced block of a markdown text, in order."""
    out: list[Block] = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].splitlines()
        directives: list[str] = []
        for prev in reversed(before):
            d = _DIRECTIVE.match(prev.strip())
            if not d:
                break
            directives.insert(0, d.group(1))
        out.append(Block(len(before) + 1, m.group(1), m.group(2), tuple(directives)))
    return out


def is_shell_block(block: Block) -> bool:
    """A block a user would paste into a shell: labelled bash/sh/console, or unlabelled and starting with a command."""
    if block.lang in SHELL_LANGS:
        return True
    if block.lang:
        return False
    first = next((ln.strip() for ln in block.text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    return bool(re.match(r"^(\$ )?(tailscope|curl|pip|ray|promtool|kill|[A-Z_]+=\S+ \S+) ", first))


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` after whitespace, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _split_list(line: str) -> list[str]:
    """``a && b ; c`` → [a, b, c] (outside quotes)."""
    parts: list[str] = []
    quote = ""
    cur = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif line.startswith("&&", i) or ch == ";":
            parts.append(cur.strip())
            cur = ""
            i += 2 if ch == "&" else 1
            continue
        cur += ch
        i += 1
    parts.append(cur.strip())
    return [p for p in parts if p]


def commands(text: str, first_line: int = 1) -> list[Command]:
    """The commands of a shell block's text (``first_line``: the doc line of the text's first line)."""
    raw = text.splitlines()
    prompted = any(ln.startswith("$ ") for ln in raw)
    out: list[Command] = []
    pending = ""
    start = 0
    shown: list[str] = []

    def close_output() -> None:
        if out and shown:
            last = out[-1]
            note = EXIT_NOTE.search(shown[-1]) if shown else None
            expect = int(note.group(1)) if note else last.expect
            out[-1] = Command(last.line, last.text, last.background, expect, tuple(shown))
        shown.clear()

    for n, line in enumerate(raw):
        if pending:
            line = pending + line.strip()
        elif prompted:
            if not line.startswith("$ "):
                shown.append(line)
                continue
            close_output()
            line = line[2:]
            start = n
        else:
            start = n
        line = line.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        line = _strip_comment(line)
        if not line or line.startswith("#"):
            continue
        for part in _split_list(line):
            background = part.endswith("&") and not part.endswith("&&")
            out.append(Command(first_line + start, part.rstrip("&").strip() if background else part, background))
    close_output()
    return out


def _strip_optional(line: str) -> str | None:
    """The line without its ``[--optional]`` parts (outside quotes); None when an optional part is not a flag (an
    optional argument: the line is a synopsis)."""
    out = ""
    depth = 0
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and depth == 0:
            quote = ch
        elif ch == "[":
            if depth == 0 and not line[i + 1 :].startswith("-"):
                return None
            depth += 1
            continue
        elif ch == "]" and depth:
            depth -= 1
            continue
        if depth == 0:
            out += ch
    return re.sub(r"\s+", " ", out).strip()


def runnable_form(cmd: str) -> str | None:
    """The command as it can run: optional ``[…]`` parts dropped and ``RUN``/``RUN_ID`` as ``latest``; None when it
    still has a placeholder (``SET``, ``FILE`` …), an alternative (``a|b``) or an ellipsis: a synopsis."""
    stripped = _strip_optional(cmd)
    if stripped is None:
        return None
    line = stripped
    if "…" in line or "..." in line:
        return None
    try:
        tokens = shlex.split(line)
    except ValueError:
        return None
    if not tokens:  # a synopsis' continuation line: nothing but [options]
        return None
    if any("|" in t and " " not in t for t in tokens):
        return None
    for t in tokens:
        value = t.split("=", 1)[1] if t.startswith("--") and "=" in t else t
        if value in PLACEHOLDERS:
            return None
    line = re.sub(r"(?<![\w-])RUN(_ID)?(?![\w-])", "latest", line)
    return line


def flag_tokens(cmd: str) -> list[str]:
    """The ``--flag`` tokens of a command line (quoted arguments and ``=value`` aside, ``[…]``/``a|b`` opened up)."""
    line = re.sub(r"[\[\]]", " ", cmd)
    try:
        tokens = shlex.split(line)
    except ValueError:
        tokens = line.split()
    flags: list[str] = []
    for t in tokens:
        for alt in t.split("|"):
            if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", alt):
                flags.append(alt.split("=", 1)[0])
    return flags


def inline_commands(text: str) -> list[tuple[int, str]]:
    """The ``tailscope …`` commands quoted inline in prose (`` `tailscope bench --url …` ``), with their lines."""
    out: list[tuple[int, str]] = []
    prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for n, line in enumerate(prose.splitlines(), 1):
        for m in re.finditer(r"`(tailscope [^`]+)`", line):
            out.append((n, m.group(1)))
    return out
