"""Helpers the peer readers share: JSON documents and lines, numbers, error classes, time conversions."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tailscope.errors import ContractError
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource


def _json_docs(text: str, src: str) -> list[tuple[int, Any]]:
    """One JSON document, or one per line (vLLM's --append-result); (line number or 0, document)."""
    try:
        return [(0, json.loads(text))]
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise ContractError(f"{src}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    docs: list[tuple[int, Any]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                docs.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ContractError(f"{src}:{i}: invalid JSON ({exc.msg})") from None
    return docs


def _num(value: Any, where: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ContractError(f"{where}: expected a number (got {value!r})")
    return float(value)


def _list(doc: dict[str, Any], key: str, n: int | None, where: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ContractError(f"{where}: {key} must be a list (got {type(value).__name__})")
    if n is not None and len(value) != n:
        raise ContractError(f"{where}: {key} has {len(value)} entries, start_times {n}")
    return value


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (optional sections of a peer's file)."""
    return value if isinstance(value, dict) else {}


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _spread(tokens: int, chunks: int) -> tuple[int, ...]:
    """``tokens`` over ``chunks`` as evenly as integers allow (earlier chunks get the remainder)."""
    if chunks <= 0:
        return ()
    q, r = divmod(max(tokens, 0), chunks)
    return tuple(q + (1 if i < r else 0) for i in range(chunks))


def _completed(
    record: Callable[..., RequestRecord],
    chunks: Sequence[int],
    tokens: tuple[int, ...],
    *,
    end_ns: int,
    output_tokens: int,
    tokens_source: TokensSource,
    stream_end_ns: int | None = None,
    first_event_ns: int | None = None,
    **extra: Any,
) -> RequestRecord:
    """A peer's successful streamed request from its chunk times (ns) and tokens per chunk.

    ``record`` makes the record (the request's id, times and prompt already bound). The first token is the first
    chunk, which is also the first event unless the peer saw an earlier one (a role-only delta); the stream ends with
    the request unless the peer timed its end apart.
    """
    return record(
        first_token_ns=chunks[0],
        end_ns=end_ns,
        status=Status.OK,
        output_tokens=output_tokens,
        tokens_source=tokens_source,
        chunk_times_ns=tuple(chunks),
        chunk_tokens=tokens,
        stream_end_ns=end_ns if stream_end_ns is None else stream_end_ns,
        first_event_ns=chunks[0] if first_event_ns is None else first_event_ns,
        **extra,
    )


def _error_class(text: str, code: int | None = None) -> ErrorClass:
    if code == 429:
        return ErrorClass.HTTP_429
    if code == 401:
        return ErrorClass.HTTP_401
    if code is not None and 500 <= code < 600:
        return ErrorClass.HTTP_5XX
    if code is not None and 400 <= code < 500 and code != 499:
        return ErrorClass.HTTP_4XX
    low = text.lower()
    if "cancel" in low:
        return ErrorClass.CANCELLED
    if "timeout" in low or "timed out" in low:
        return ErrorClass.TIMEOUT_TOTAL
    if "connect" in low:
        return ErrorClass.CONNECT
    return ErrorClass.OTHER


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stats(src: dict[str, Any], prefix_fmt: str, metric: str) -> dict[str, float]:
    """vLLM's ``mean_ttft_ms``, ``median_ttft_ms``, ``p99_ttft_ms`` … as ``{mean, median, p99, …}``."""
    out: dict[str, float] = {}
    for key, value in src.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        for stat in ("mean", "median", "std"):
            if key == prefix_fmt.format(stat=stat, metric=metric):
                out[stat] = float(value)
        if key.startswith("p") and key.endswith(f"_{metric}_ms"):
            out[key[: -len(f"_{metric}_ms")]] = float(value)
    return out
