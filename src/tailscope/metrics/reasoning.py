"""What modern servers return beside the text: reasoning before the answer, and prompt tokens served from cache.

Definitions (docs/metrics.md, "Reasoning and cached tokens"):

* **time to first answer token** (``ttfa_ms``): from the intended send time to the first ``delta.content`` token —
  for a reasoning model, after its ``reasoning_content``/``reasoning`` deltas; TTFT stays the first token of any kind
  (the first reasoning token when the model reasons).
* **reasoning / answer tokens**: a request's output tokens that were reasoning (the server's
  ``usage.completion_tokens_details.reasoning_tokens`` when it reports them, else the reasoning events' counts) and
  the rest.
* **prompt-cache hit rate** (per request): ``usage.prompt_tokens_details.cached_tokens`` ÷ prompt tokens; the run's
  figure is the sum of cached tokens over the sum of prompt tokens of the requests that report them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.record_ops import FieldsDocument
from tailscope.records import RequestRecord


@dataclass(frozen=True, slots=True)
class Reasoning(FieldsDocument):
    """The reasoning requests of a run: how long users waited for the answer, and how the output split."""

    requests: int
    ttfa_ms: Stats
    reasoning_tokens: Stats
    answer_tokens: Stats


@dataclass(frozen=True, slots=True)
class PromptCache:
    """Prompt tokens served from the server's prefix cache, as the server reported them per request."""

    requests: int
    cached_tokens: int
    prompt_tokens: int

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "hit_rate": self.hit_rate,
        }


def reasoning_of(ok: Sequence[RequestRecord]) -> Reasoning | None:
    """The reasoning block of successful, measured requests; None when no request reasoned."""
    rs = [r for r in ok if r.reasoning_tokens]
    if not rs:
        return None
    ttfa = [(r.first_answer_ns - r.scheduled_ns) / 1e6 for r in rs if r.first_answer_ns is not None]
    answer = [float(max(0, (r.output_tokens or 0) - (r.reasoning_tokens or 0))) for r in rs]
    return Reasoning(
        requests=len(rs),
        ttfa_ms=compute_stats(ttfa),
        reasoning_tokens=compute_stats([float(r.reasoning_tokens or 0) for r in rs]),
        answer_tokens=compute_stats(answer),
    )


def prompt_cache_of(ok: Sequence[RequestRecord]) -> PromptCache | None:
    """The prompt-cache block of successful requests that report cached tokens; None when none does."""
    rs = [r for r in ok if r.cached_tokens is not None and r.input_tokens]
    if not rs:
        return None
    return PromptCache(
        requests=len(rs),
        cached_tokens=sum(r.cached_tokens or 0 for r in rs),
        prompt_tokens=sum(r.input_tokens or 0 for r in rs),
    )
