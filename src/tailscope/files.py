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


def make_folder(folder: str | os.PathLike[str], what: str, path: str | os.PathLike[str] | None = None) -> None:
    """Create an output's folder: the folder itself when its parent exists, never a chain of missing folders and
    never a folder at the filesystem's root (``--out /nonexistent/x`` is a typo, not a request to build
    ``/nonexistent``).

    Raises:
        ConfigError: ``{what} {path}: folder F does not exist; create it first (or write elsewhere)``, or the OS reason.
    """
    f = Path(folder)
    shown = path if path is not None else folder
    if f.is_dir():
        return
    if f.exists():
        raise ConfigError(f"{what} {shown}: cannot write it ({f} is a file, not a folder)")
    parent = f.absolute().parent
    if not parent.is_dir() or parent == parent.parent:
        missing = f if parent == parent.parent else parent
        while not missing.parent.is_dir():
            missing = missing.parent
        raise ConfigError(f"{what} {shown}: folder {missing} does not exist; create it first (or write elsewhere)")
    try:
        f.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {shown}: cannot create its folder ({exc.strerror or exc})") from None


def check_output(path: str | os.PathLike[str] | None, what: str) -> None:
    """Refuse an output path that cannot be written *before* any work (a bench's load): its folder must exist or be
    one level short of an existing one (see :func:`make_folder`), and the path must not be a folder.

    Raises:
        ConfigError: naming the flag and the path.
    """
    if path is None or to_stdout(path):
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; name a file in it")
    if p.parent.is_dir():
        return
    parent = p.parent.absolute().parent
    if p.parent.exists() or not parent.is_dir() or parent == parent.parent:
        make_folder(p.parent, what, path)  # raises, naming the file in the way or the first missing folder


def to_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether an output path is ``-``, standard output (a command's tables then go to stderr, or nowhere)."""
    return path is not None and str(path) == "-"


def write_text(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write an output file as UTF-8, creating its folder (one level: see :func:`make_folder`).

    Raises:
        ConfigError: ``{what} {path}: cannot write it (why)`` — ``what`` names the option (``--json``).
    """
    p = Path(path)
    make_folder(p.parent, what, path)
    try:
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
    make_folder(Path(path).parent, what, path)
    try:
        with Path(path).open("wb") as f:
            for chunk in chunks:
                f.write(chunk)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write it ({exc.strerror or exc})") from None
