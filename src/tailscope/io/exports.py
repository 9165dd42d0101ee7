"""JSON files the verify family reads: a run's ``tailscope bench --json`` export, a spans JSON file, a
``tailscope trace analyze --json`` document.

Each failure is one :class:`~tailscope.errors.ContractError` (exit code 2, "invalid input") naming the file and, for
JSON syntax, the line.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tailscope.errors import ContractError, TailscopeError
from tailscope.files import read_user_text
from tailscope.verify.rundata import RunData, run_from_export


def read_json(path: str | os.PathLike[str], *, what: str, error: type[TailscopeError] = ContractError) -> Any:
    """The parsed JSON document of a file.

    Raises:
        error: the file cannot be read or is not UTF-8 (naming it), or ``file:line: invalid JSON (why)``.
    """
    text = read_user_text(path, what=what, error=error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def read_export(path: str | os.PathLike[str], *, error: type[TailscopeError] = ContractError) -> RunData:
    """A run from a ``tailscope bench --json`` (or ``runs export --format json``) file.

    Raises:
        error: the file cannot be read or parsed. ContractError: the document is not an export.
    """
    return run_from_export(read_json(path, what="export", error=error), source=str(path))


def read_trace_analysis(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A ``tailscope trace analyze --json`` document.

    Raises:
        ContractError: the file cannot be read, is not JSON or is not a JSON object.
    """
    doc = read_json(path, what="trace analysis")
    if not isinstance(doc, dict):
        raise ContractError(f"{path}: expected the JSON object written by `tailscope trace analyze --json`")
    return doc
