"""Whether two runs measured the same thing: a comparison of different workloads, targets or cache states must say so.

``compare`` and ``gate`` (against a baseline) put these lines first: a difference between runs that sent other
workloads, to other servers, or found their prompts in the prefix cache at other rates is not a regression or an
improvement of the system, and no significance mark means otherwise without this warning beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailscope.verify.rundata import RunData

#: settings that define the offered workload (a difference makes the runs measure different things)
WORKLOAD_KEYS = (
    "mode", "concurrency", "rate", "arrival", "burstiness", "input_tokens", "output_tokens", "endpoint", "profile",
    "dataset", "replay", "time_scale", "ignore_eos",
)  # fmt: skip
#: prefix-cache hit rates further apart than this (as a fraction) are a different cache state
HIT_RATE_GAP = 0.10


def _target(run: RunData) -> tuple[str, str]:
    """(where, model): the URL, or for the built-in engine (served on a new free port every run) its description."""
    target = run.run.get("target") if isinstance(run.run, Mapping) else None
    if not isinstance(target, Mapping):
        return "", ""
    where = str(target.get("url") or "")
    if target.get("builtin") and target.get("description"):
        where = f"the built-in engine ({target['description']})"
    return where, str(target.get("model") or "")


def _hit_rate(run: RunData) -> float | None:
    server = (run.summary or {}).get("server") if run.summary is not None else None
    value = server.get("prefix_cache_hit_rate") if isinstance(server, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _show(value: Any) -> str:
    return "—" if value is None else str(value)


def comparability(reference: RunData, other: RunData) -> tuple[str, ...]:
    """Warnings when ``other`` did not measure what ``reference`` measured (empty when nothing is known to differ)."""
    out: list[str] = []
    a, b = reference.settings or {}, other.settings or {}
    differing = [k for k in WORKLOAD_KEYS if k in a and k in b and a[k] != b[k]]
    if differing:
        detail = ", ".join(f"{k} {_show(a[k])} vs {_show(b[k])}" for k in differing[:4])
        out.append(f"DIFFERENT WORKLOADS: {other.id} vs {reference.id}: {detail}; not only the system differs")
    ta, tb = _target(reference), _target(other)
    if all(ta) and all(tb) and ta != tb:
        out.append(f"DIFFERENT TARGETS: {other.id} measured {tb[1]} at {tb[0]}, {reference.id} {ta[1]} at {ta[0]}")
    ma, mb = a.get("prompt_content"), b.get("prompt_content")
    if ma and mb and ma != mb:
        out.append(
            f"PROMPT CONTENT: {reference.id} sent {ma} prompts, {other.id} {mb} ones (--same-prompts warms caches on "
            "purpose): a latency change may be the cache, not the system"
        )
    ha, hb = _hit_rate(reference), _hit_rate(other)
    if ha is not None and hb is not None and abs(ha - hb) > HIT_RATE_GAP:
        out.append(
            f"CACHE STATE: prefix-cache hit rate {ha:.0%} in {reference.id} vs {hb:.0%} in {other.id} (> "
            f"{HIT_RATE_GAP:.0%} apart): the runs did not see the same cache, so a TTFT change may be the cache"
        )
    return tuple(out)
