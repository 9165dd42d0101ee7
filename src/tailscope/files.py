"""Reading user-supplied files: one place that turns OS and encoding failures into clear TailscopeErrors."""

from __future__ import annotations

import os
from pathlib import Path

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
