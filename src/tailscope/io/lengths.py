"""Files of observed lengths for ``empirical`` distributions in profiles (CSV or JSON lines).

A CSV holds one column of numbers (or names one with a header and ``column:``); a JSON-lines file holds numbers, or
objects whose ``column`` key is the number. Every bad row is one :class:`~tailscope.errors.ProfileError` naming the
file and the line.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from tailscope.errors import ProfileError
from tailscope.files import read_user_text
from tailscope.io._schema import json_lines


def read_lengths(path: Path, *, column: str | None = None) -> tuple[int, ...]:
    """Observed lengths from a CSV (one column, or ``column`` by header name) or JSONL (numbers, or objects with
    ``column``) file.

    Raises:
        ProfileError: ``file:line: …`` for a bad row, or when the file holds no lengths.
    """
    text = read_user_text(path, what="lengths file", error=ProfileError)
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        out = _from_json_lines(text, path, column)
    else:
        out = _from_csv(text, path, column)
    if not out:
        raise ProfileError(f"{path}: holds no lengths")
    return tuple(out)


def _from_json_lines(text: str, path: Path, column: str | None) -> list[int]:
    out: list[int] = []
    for n, obj in json_lines(text, source=str(path), error=ProfileError):
        value = obj
        if isinstance(obj, dict):
            if column is None or column not in obj:
                raise ProfileError(f"{path}:{n}: an object row needs the key named by column (got column={column!r})")
            value = obj[column]
        out.append(_length_value(value, path, n))
    return out


def _from_csv(text: str, path: Path, column: str | None) -> list[int]:
    rows = list(csv.reader(text.splitlines()))
    idx = 0
    start = 0
    if rows and not all(_is_number(c) for c in rows[0] if c.strip()):
        header = [c.strip() for c in rows[0]]
        if column is not None:
            if column not in header:
                raise ProfileError(f"{path}:1: no column {column!r} (columns: {', '.join(header)})")
            idx = header.index(column)
        elif len(header) != 1:
            raise ProfileError(f"{path}:1: several columns ({', '.join(header)}); name one with column:")
        start = 1
    out: list[int] = []
    for n, row in enumerate(rows[start:], start + 1):
        if not row or not any(c.strip() for c in row):
            continue
        if idx >= len(row):
            raise ProfileError(f"{path}:{n}: row has no column {idx + 1}")
        out.append(_length_value(row[idx].strip(), path, n))
    return out


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _length_value(v: Any, path: Path, n: int) -> int:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ProfileError(f"{path}:{n}: a length must be a number (got {v!r})") from None
    if not 0 <= x < math.inf:  # NaN fails too
        raise ProfileError(f"{path}:{n}: a length must be a finite number ≥ 0 (got {v!r})")
    return round(x)
