"""Trace files for replay (``--replay FILE``): read, validated row by row (pydantic), handed on as
:class:`~tailscope.workload.replay.ReplayRow`.

Formats (chosen by ``fmt``, or detected from the file):

- ``tailscope`` JSONL: ``{"timestamp_s": 0.0, "input_tokens": 120, "output_tokens": 80, "class": "chat",
  "session": "u1", "think_time_s": 2.0}`` per line; ``class``, ``session`` and ``think_time_s`` are optional.
- ``mooncake`` JSONL (the Mooncake/FAST'25 trace layout, also read by AIPerf): ``{"timestamp": MS, "input_length": N,
  "output_length": M, "hash_ids": [...]}`` with ``timestamp`` in milliseconds; ``hash_ids`` are kept as a prefix key
  (requests whose first block hash is equal share a prefix variant).
- ``azure`` CSV (Azure LLM inference traces 2023/2024, AzurePublicDataset): header ``TIMESTAMP,ContextTokens,
  GeneratedTokens``; ``TIMESTAMP`` is a date-time like ``2023-11-16 18:15:46.6805900`` (or seconds).

Every problem is one :class:`~tailscope.errors.ProfileError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from tailscope.errors import ProfileError
from tailscope.files import read_user_text
from tailscope.io._schema import json_lines, validate_row
from tailscope.workload.replay import ReplayRow

FORMATS = ("auto", "tailscope", "mooncake", "azure")


def _whole(v: float) -> float:
    if v != int(v):
        raise ValueError(f"must be a whole number of tokens (got {v!r})")
    return v


def _session(v: Any) -> Any:
    if v is not None and (isinstance(v, bool) or not isinstance(v, str | int)):
        raise ValueError(f"must be a string or number (got {v!r})")
    return v


#: JSON numbers only (no strings, no booleans), finite
Seconds = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Tokens = Annotated[float, Field(strict=True, ge=1, allow_inf_nan=False), AfterValidator(_whole)]
TokensOrZero = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False), AfterValidator(_whole)]


class _TailscopeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timestamp_s: Seconds
    input_tokens: Tokens
    output_tokens: Tokens
    request_class: str = Field(default="replay", alias="class", strict=True, min_length=1)
    session: Annotated[str | int | None, BeforeValidator(_session)] = None
    think_time_s: Seconds | None = None


class _MooncakeRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timestamp: Seconds  # milliseconds
    input_length: Tokens
    output_length: TokensOrZero  # a zero-token row asks for one token
    hash_ids: Any = None


def _azure_time(v: Any) -> Any:
    v = str(v).strip()
    try:
        return float(v)
    except ValueError:
        pass
    head, dot, frac = v.partition(".")
    try:
        base = datetime.fromisoformat(head.replace("T", " ").removesuffix("Z"))
        fraction = float("0." + "".join(ch for ch in frac if ch.isdigit())) if dot and frac else 0.0
    except ValueError:
        raise ValueError(f"{v!r} is neither seconds nor a date-time like 2023-11-16 18:15:46.68") from None
    return base.replace(tzinfo=UTC).timestamp() + fraction


class _AzureRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    TIMESTAMP: Annotated[float, BeforeValidator(_azure_time)]
    ContextTokens: int = Field(ge=0)
    GeneratedTokens: int = Field(ge=0)


_NEEDS = {
    "tailscope": "a row needs timestamp_s, input_tokens and output_tokens",
    "mooncake": "a row needs timestamp (ms), input_length and output_length",
    "azure": "a row needs TIMESTAMP, ContextTokens and GeneratedTokens",
}


def read_replay(path: str | os.PathLike[str], *, fmt: str = "auto") -> list[ReplayRow]:
    """Read and parse a trace file (see :func:`parse_replay`).

    Raises:
        ProfileError: ``file:line: what is wrong`` for an unreadable file or the first bad row.
    """
    return parse_replay(read_user_text(path, what="trace", error=ProfileError), source=str(path), fmt=fmt)


def parse_replay(text: str, *, source: str, fmt: str = "auto") -> list[ReplayRow]:
    """Rows of trace ``text``, times made relative to the earliest row, sorted by time (stable for equal times).

    Args:
        source: the file name for messages; its suffix (``.csv``) picks the format when ``fmt`` is ``auto``.

    Raises:
        ProfileError: ``file:line: what is wrong`` for the first bad row, an unknown format or an empty trace.
    """
    if fmt not in FORMATS:
        raise ProfileError(f"--replay-format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "auto":
        fmt = _detect(source, text)
    rows = _parse_azure(text, source) if fmt == "azure" else _parse_jsonl(text, source, fmt)
    if not rows:
        raise ProfileError(f"{source}: the trace holds no requests")
    t0 = min(r.timestamp_s for r in rows)
    if t0:  # the constructor, not dataclasses.replace: traces hold millions of rows
        rows = [
            ReplayRow(
                r.line,
                r.timestamp_s - t0,
                r.input_tokens,
                r.output_tokens,
                r.request_class,
                r.session,
                r.think_time_s,
                r.prefix_key,
            )
            for r in rows
        ]
    rows.sort(key=lambda r: r.timestamp_s)
    return rows


def _detect(source: str, text: str) -> str:
    if Path(source).suffix.lower() == ".csv":
        return "azure"
    for line in text.splitlines():
        if line.strip():
            try:
                first = json.loads(line)
            except json.JSONDecodeError:
                break
            return "mooncake" if isinstance(first, dict) and "input_length" in first else "tailscope"
    return "tailscope"


def _parse_jsonl(text: str, source: str, fmt: str) -> list[ReplayRow]:
    rows: list[ReplayRow] = []
    mooncake = fmt == "mooncake"
    model = _MooncakeRow if mooncake else _TailscopeRow
    for n, obj in json_lines(text, source=source, error=ProfileError):
        if not isinstance(obj, dict):
            raise ProfileError(f"{source}:{n}: a row must be a JSON object (got {type(obj).__name__})")
        r = validate_row(model, obj, source=source, line=n, needs=_NEEDS[fmt], error=ProfileError)
        if isinstance(r, _MooncakeRow):
            hashes = r.hash_ids
            key = hashes[0] if isinstance(hashes, list) and hashes and isinstance(hashes[0], int) else None
            out = max(1, int(r.output_length))
            rows.append(ReplayRow(n, r.timestamp / 1000.0, int(r.input_length), out, prefix_key=key))
        else:
            session = None if r.session is None else str(r.session)
            inp, out = int(r.input_tokens), int(r.output_tokens)
            rows.append(ReplayRow(n, r.timestamp_s, inp, out, r.request_class, session, r.think_time_s))
    return rows


def _parse_azure(text: str, source: str) -> list[ReplayRow]:
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    cols = [c.strip() for c in header] if header else []
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    missing = [c for c in need if c not in cols]
    if missing:
        raise ProfileError(f"{source}:1: missing column {missing[0]} (the Azure trace header is {','.join(need)})")
    at = [(c, cols.index(c)) for c in need]
    rows: list[ReplayRow] = []
    for n, row in enumerate(reader, 2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) < len(cols):
            raise ProfileError(f"{source}:{n}: expected {len(cols)} columns (got {len(row)})")
        values = {c: row[i].strip() for c, i in at}
        r = validate_row(_AzureRow, values, source=source, line=n, needs=_NEEDS["azure"], error=ProfileError)
        # a request must ask for ≥ 1 token each way; the trace has a few zero-token rows
        rows.append(ReplayRow(n, r.TIMESTAMP, max(1, r.ContextTokens), max(1, r.GeneratedTokens)))
    return rows
