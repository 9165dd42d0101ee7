"""Trace replay: request streams from recorded arrival times and lengths (``--replay FILE``, ``--time-scale``).

Formats (chosen by ``fmt``, or detected from the file):

- ``tailscope`` JSONL: ``{"timestamp_s": 0.0, "input_tokens": 120, "output_tokens": 80, "class": "chat",
  "session": "u1", "think_time_s": 2.0}`` per line; ``class``, ``session`` and ``think_time_s`` are optional.
- ``mooncake`` JSONL (the Mooncake/FAST'25 trace layout, also read by AIPerf): ``{"timestamp": MS, "input_length": N,
  "output_length": M, "hash_ids": [...]}`` with ``timestamp`` in milliseconds; ``hash_ids`` are kept as a prefix key
  (requests whose first block hash is equal share a prefix variant).
- ``azure`` CSV (Azure LLM inference traces 2023/2024, AzurePublicDataset): header ``TIMESTAMP,ContextTokens,
  GeneratedTokens``; ``TIMESTAMP`` is a date-time like ``2023-11-16 18:15:46.6805900`` (or seconds).

Timestamps are made relative to the earliest row and multiplied by ``time_scale`` (0.5 replays twice as fast,
2 half as fast). Rows of one ``session`` become turns: the first keeps its time, the later ones are sent
``think_time_s`` (default: the gap between the rows' timestamps) after the previous turn completed.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tailscope.errors import ProfileError
from tailscope.files import read_user_text
from tailscope.workload.spec import RequestSpec

FORMATS = ("auto", "tailscope", "mooncake", "azure")
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """One request of a trace (times in seconds from the trace's first request, before scaling)."""

    line: int
    timestamp_s: float
    input_tokens: int
    output_tokens: int
    request_class: str = "replay"
    session: str | None = None
    think_time_s: float | None = None
    prefix_key: int | None = None


def read_replay(path: str | Path, *, fmt: str = "auto") -> list[ReplayRow]:
    """Parse a trace file into rows sorted by time (stable for equal times).

    Raises:
        ProfileError: ``file:line: what is wrong`` for the first bad row, an unknown format or an empty file.
    """
    p = Path(path)
    if fmt not in FORMATS:
        raise ProfileError(f"--replay-format {fmt!r}: use one of {', '.join(FORMATS)}")
    text = read_user_text(p, what="trace", error=ProfileError)
    if fmt == "auto":
        fmt = _detect(p, text)
    rows = _parse_azure(p, text) if fmt == "azure" else _parse_jsonl(p, text, fmt)
    if not rows:
        raise ProfileError(f"{path}: the trace holds no requests")
    t0 = min(r.timestamp_s for r in rows)
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


def _detect(p: Path, text: str) -> str:
    if p.suffix.lower() == ".csv":
        return "azure"
    for line in text.splitlines():
        if line.strip():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break
            if isinstance(obj, dict) and "input_length" in obj:
                return "mooncake"
            return "tailscope"
    return "tailscope"


def _num(obj: dict[str, Any], key: str, p: Path, n: int, *, integer: bool, minimum: float = 0) -> float:
    if key not in obj:
        raise ProfileError(f"{p}:{n}: missing {key!r} (a row needs {_needs(obj)})")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProfileError(f"{p}:{n}: {key} must be a number (got {v!r})")
    if integer and float(v) != int(v):
        raise ProfileError(f"{p}:{n}: {key} must be a whole number of tokens (got {v!r})")
    if v < minimum or v != v:
        raise ProfileError(f"{p}:{n}: {key} must be ≥ {minimum:g} (got {v!r})")
    return float(v)


def _needs(obj: dict[str, Any]) -> str:
    if "input_length" in obj or "timestamp" in obj:
        return "timestamp (ms), input_length and output_length"
    return "timestamp_s, input_tokens and output_tokens"


def _parse_jsonl(p: Path, text: str, fmt: str) -> list[ReplayRow]:
    rows: list[ReplayRow] = []
    mooncake = fmt == "mooncake"
    known = (
        {"timestamp", "input_length", "output_length", "hash_ids"}
        if mooncake
        else {"timestamp_s", "input_tokens", "output_tokens", "class", "session", "think_time_s"}
    )
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{p}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise ProfileError(f"{p}:{n}: a row must be a JSON object (got {type(obj).__name__})")
        unknown = sorted(set(obj) - known)
        if unknown and not mooncake:
            raise ProfileError(f"{p}:{n}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(known))})")
        if mooncake:
            ts = _num(obj, "timestamp", p, n, integer=False) / 1000.0
            inp = int(_num(obj, "input_length", p, n, integer=True, minimum=1))
            out = int(_num(obj, "output_length", p, n, integer=True))
            hashes = obj.get("hash_ids")
            key = hashes[0] if isinstance(hashes, list) and hashes and isinstance(hashes[0], int) else None
            rows.append(ReplayRow(n, ts, inp, max(1, out), prefix_key=key))
            continue
        ts = _num(obj, "timestamp_s", p, n, integer=False)
        inp = int(_num(obj, "input_tokens", p, n, integer=True, minimum=1))
        out = int(_num(obj, "output_tokens", p, n, integer=True, minimum=1))
        cls = obj.get("class", "replay")
        if not isinstance(cls, str) or not cls:
            raise ProfileError(f"{p}:{n}: class must be a non-empty string (got {cls!r})")
        ses = obj.get("session")
        if ses is not None and not isinstance(ses, str | int):
            raise ProfileError(f"{p}:{n}: session must be a string or number (got {ses!r})")
        think = _num(obj, "think_time_s", p, n, integer=False) if "think_time_s" in obj else None
        rows.append(ReplayRow(n, ts, inp, out, cls, None if ses is None else str(ses), think))
    return rows


def _parse_time(v: str, p: Path, n: int) -> float:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        pass
    head, dot, frac = v.partition(".")
    try:
        base = datetime.fromisoformat(head.replace("T", " ").removesuffix("Z"))
        fraction = float("0." + "".join(ch for ch in frac if ch.isdigit())) if dot and frac else 0.0
    except ValueError:
        raise ProfileError(
            f"{p}:{n}: TIMESTAMP {v!r} is neither seconds nor a date-time like 2023-11-16 18:15:46.68"
        ) from None
    return base.replace(tzinfo=UTC).timestamp() + fraction


def _parse_azure(p: Path, text: str) -> list[ReplayRow]:
    lines = text.splitlines()
    reader = csv.reader(lines)
    header = next(reader, None)
    cols = [c.strip() for c in header] if header else []
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    missing = [c for c in need if c not in cols]
    if missing:
        raise ProfileError(f"{p}:1: missing column {missing[0]} (the Azure trace header is {','.join(need)})")
    it, ic, ig = (cols.index(c) for c in need)
    rows: list[ReplayRow] = []
    for n, row in enumerate(reader, 2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) < len(cols):
            raise ProfileError(f"{p}:{n}: expected {len(cols)} columns (got {len(row)})")
        ts = _parse_time(row[it], p, n)
        vals = []
        for idx, name in ((ic, "ContextTokens"), (ig, "GeneratedTokens")):
            try:
                v = int(row[idx].strip())
            except ValueError:
                raise ProfileError(f"{p}:{n}: {name} must be a whole number (got {row[idx]!r})") from None
            if v < 0:
                raise ProfileError(f"{p}:{n}: {name} must be ≥ 0 (got {v})")
            vals.append(v)
        # a request must ask for ≥ 1 token each way; the trace has a few zero-token rows
        rows.append(ReplayRow(n, ts, max(1, vals[0]), max(1, vals[1])))
    return rows


def replay_requests(
    rows: list[ReplayRow],
    *,
    seed: int,
    time_scale: float = 1.0,
    warmup: int = 0,
    max_requests: int | None = None,
    duration_s: float | None = None,
    prefix_tokens: int = 0,
) -> Iterator[RequestSpec]:
    """Request specs for a parsed trace.

    Args:
        rows: rows from :func:`read_replay` (sorted by time).
        seed: per-request prompt seeds derive from it.
        time_scale: multiplies every timestamp and think time (0.5 = twice as fast).
        warmup: the first N requests are warmup.
        max_requests: stop after this many requests.
        duration_s: drop requests scheduled at or after this time (scaled seconds).
        prefix_tokens: for Mooncake traces, the shared-prefix length given to rows with a ``prefix_key``
            (0 = no shared prefixes).

    Raises:
        ProfileError: for a non-positive ``time_scale``.
    """
    if not time_scale > 0:
        raise ProfileError(f"--time-scale must be > 0 (got {time_scale!r}); 0.5 replays twice as fast")
    last_ts: dict[str, float] = {}
    turns: dict[str, int] = {}
    prefix_ids: dict[int, int] = {}
    i = 0
    for r in rows:
        t = r.timestamp_s * time_scale
        if duration_s is not None and t >= duration_s:
            continue
        if max_requests is not None and i >= max_requests:
            return
        turn: int | None = None
        at_ns: int | None = round(t * _NS)
        think_ns = 0
        if r.session is not None:
            turn = turns.get(r.session, 0)
            turns[r.session] = turn + 1
            if turn > 0:
                gap = r.think_time_s if r.think_time_s is not None else r.timestamp_s - last_ts[r.session]
                think_ns = round(max(0.0, gap) * time_scale * _NS)
                at_ns = None
            last_ts[r.session] = r.timestamp_s
        prefix_id = None
        ptoks = 0
        if prefix_tokens > 0 and r.prefix_key is not None and (turn is None or turn == 0):
            prefix_id = prefix_ids.setdefault(r.prefix_key, len(prefix_ids))
            ptoks = min(prefix_tokens, r.input_tokens)
        yield RequestSpec(
            id=i,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            at_ns=at_ns,
            request_class=r.request_class,
            prefix_id=prefix_id,
            prefix_tokens=ptoks,
            session_id=r.session,
            turn=turn,
            think_time_ns=think_ns,
            warmup=i < warmup,
            seed=seed * 1_000_003 + i,
        )
        i += 1
