"""Reading user-supplied files and writing the files a user names: one place that turns OS and encoding failures
into clear TailscopeErrors. A path of ``-`` names standard output for the writers."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tailscope.errors import ConfigError, TailscopeError


def read_user_text(path: str | os.PathLike[str], *, what: str, error: type[TailscopeError] = ConfigError) -> str:
    """The file's text as UTF-8.

    Args:
        path: the file.
        what: what the file is, for the message (``profile``, ``contract``, ``trace``…).
        error: the TailscopeError subclass to raise.

    Raises:
        error: naming the path: unreadable (with the OS reason) or not UTF-8 (with the byte offset).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}:{line}: the {what} is not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})"
        ) from None


def to_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether an output path is ``-``, standard output (a command's tables then go to stderr, or nowhere)."""
    return path is not None and str(path) == "-"


def write_text(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write an output file as UTF-8, creating its folder.

    Raises:
        ConfigError: ``{what} {path}: cannot write it (why)`` — ``what`` names the option (``--json``).
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write it ({exc.strerror or exc})") from None


def write_json(
    path: str | os.PathLike[str] | None, doc: Any, what: str, *, indent: int = 2, end: str = "\n", default: Any = None
) -> bool:
    """Write a JSON document to ``path`` (``-``: standard output, always ending in a newline; ``end`` ends a file).
    Returns whether a path was given.

    Raises:
        ConfigError: the file cannot be written (see :func:`write_text`).
    """
    if path is None:
        return False
    text = json.dumps(doc, indent=indent, default=default)
    if to_stdout(path):
        sys.stdout.write(text + "\n")
    else:
        write_text(path, text + end, what)
    return True


def write_chunks(path: str | os.PathLike[str], chunks: Iterable[bytes], what: str = "--json") -> None:
    """Write a streamed document chunk by chunk (``-``: standard output).

    Raises:
        ConfigError: the file cannot be written (see :func:`write_text`).
    """
    if to_stdout(path):  # the document alone on stdout
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        for chunk in chunks:
            if out is not None:
                out.write(chunk)
            else:
                sys.stdout.write(chunk.decode("utf-8"))
        sys.stdout.flush()
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with Path(path).open("wb") as f:
            for chunk in chunks:
                f.write(chunk)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write it ({exc.strerror or exc})") from None
