"""Cacheability: the method's three-part score (0–100) of each operation, from the calls a trace set recorded.

* **Reuse (40 points)**: the share of an operation's calls whose arguments repeat an earlier call's within the window
  (what an ideal cache holding answers that long would hit): one point per percent, at most 40 (the method's FAQ
  retrieved in 320 of 1,000 requests scores 32). Arguments are the call's argument
  attributes (:data:`ARG_KEYS`: tool call arguments, input value, query text with its parameters, URL …); a query
  template with placeholders and no recorded parameters is not one. Calls without arguments cannot be compared and
  never count as reuse.
* **Compute cost (30 points)**: the mean duration on a log scale, 0 at :data:`COST_ZERO_MS` (a 2 ms serialisation)
  and 30 at :data:`COST_FULL_MS` (a 200 ms embedding) and above.
* **Immutability (30 points)**: how long an answer stays valid, from the user (a TTL, or a data-change rate whose
  inverse is the TTL), on a log scale from 1 s (0 points: real-time data) to a year (30; a monthly catalogue
  scores 25). Unknown without the user: 0 points, and the operation is reported as needing a TTL.

A score of at least :data:`CANDIDATE_SCORE` marks a cache candidate; its ``--cache OP=REUSE:HIT`` what-if is projected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ARG_KEYS = (
    "gen_ai.tool.call.arguments", "tool.arguments", "input.value", "gen_ai.prompt", "llm.input_messages",
    "db.query.text", "db.statement", "db.query.parameter", "url.full", "http.url", "http.target", "url.path",
    "url.query", "rpc.method", "retrieval.query",
)  # fmt: skip
_TEMPLATE_KEYS = ("db.query.text", "db.statement")
_PLACEHOLDER = re.compile(r"\$\d+|\?|%s|%\(\w+\)s|(?<![:\w]):\w+")
COST_ZERO_MS = 2.0
COST_FULL_MS = 200.0
YEAR_S = 365 * 86400.0
CANDIDATE_SCORE = 60.0


def call_key(attributes: Mapping[str, Any] | None) -> str | None:
    """The arguments of one call as a comparable string (None: no argument recorded to compare; a query template
    with placeholders and no recorded parameters is not an argument)."""
    if not attributes:
        return None
    args = {k: v for k, v in attributes.items() if k in ARG_KEYS or k.startswith("db.query.parameter.")}
    params = any(k.startswith("db.query.parameter.") for k in args)
    for k in _TEMPLATE_KEYS:
        v = args.get(k)
        if isinstance(v, str) and not params and _PLACEHOLDER.search(v):
            del args[k]
    if not args:
        return None
    return repr(sorted((k, repr(v)) for k, v in args.items()))


def reuse_points(share: float) -> float:
    return min(40.0, 100.0 * max(0.0, share))


def cost_points(mean_ms: float) -> float:
    if mean_ms <= COST_ZERO_MS:
        return 0.0
    return 30.0 * min(1.0, math.log10(mean_ms / COST_ZERO_MS) / math.log10(COST_FULL_MS / COST_ZERO_MS))


def immutability_points(ttl_s: float | None) -> float:
    if ttl_s is None or ttl_s <= 1.0:
        return 0.0
    return 30.0 * min(1.0, math.log10(ttl_s) / math.log10(YEAR_S))


@dataclass(slots=True)
class _Op:
    calls: int = 0
    duration_ns: int = 0
    compared: int = 0
    reused: int = 0


def score_calls(
    calls: Iterable[tuple[str, int, int, str | None]],
    *,
    window_ns: float,
    ttl_s: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Score operations from their calls ``(operation, start ns, duration ns, argument key)``, in any order.

    Returns:
        One row per operation, best score first: ``operation``, ``calls``, ``mean_ms``, ``compared`` (calls with
        arguments to compare), ``reuse_share``, ``reuse``/``cost``/``immutability`` points, ``score``, ``ttl_s``,
        ``candidate`` and ``note``.
    """
    ttl_s = ttl_s or {}
    ops: dict[str, _Op] = {}
    keyed: list[tuple[str, int, str]] = []
    for op, start, dur, key in calls:
        acc = ops.get(op)
        if acc is None:
            acc = ops[op] = _Op()
        acc.calls += 1
        acc.duration_ns += dur
        if key is not None:
            acc.compared += 1
            keyed.append((op, start, key))
    keyed.sort(key=lambda t: t[1])
    last: dict[tuple[str, str], int] = {}
    for op, start, key in keyed:
        k = (op, key)
        seen = last.get(k)
        if seen is not None and start - seen <= window_ns:
            ops[op].reused += 1
        last[k] = start
    rows: list[dict[str, Any]] = []
    for op, acc in ops.items():
        share = acc.reused / acc.calls
        mean_ms = acc.duration_ns / acc.calls / 1e6
        ttl = ttl_s.get(op)
        r, c, i = reuse_points(share), cost_points(mean_ms), immutability_points(ttl)
        score = r + c + i
        note = ""
        if ttl is None:
            note = "no TTL or change rate given: immutability 0 (give --ttl or --change-rate)"
        elif not acc.compared:
            note = "no argument attributes recorded: reuse cannot be measured"
        rows.append({
            "operation": op, "calls": acc.calls, "mean_ms": round(mean_ms, 3), "compared": acc.compared,
            "reuse_share": round(share, 4), "reuse": round(r, 1), "cost": round(c, 1), "immutability": round(i, 1),
            "score": round(score, 1), "ttl_s": ttl, "candidate": score >= CANDIDATE_SCORE, "note": note,
        })  # fmt: skip
    rows.sort(key=lambda row: (-row["score"], row["operation"]))
    return rows
