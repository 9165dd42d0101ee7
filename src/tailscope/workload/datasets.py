"""Request streams from a dataset's rows (pure: rows come parsed from :mod:`tailscope.io.datasets`).

A *conversation* is one row, or — with ``turns="all"`` or rows sharing a ``session`` — several turns sent as one
multi-turn session (each later turn after the previous answer, the model's own answers carrying the history).

* **Untimed rows** follow the load shape of the flags: open-loop send times or closed-loop slots, one conversation
  per arrival, taken in file order (``sample="sequential"``) or in a seeded random order (``random``); when the run
  outlasts the file the order starts again (a fresh permutation for ``random``), so rows repeat only then.
* **Timed rows** (every conversation's first row has ``timestamp_s``) are a replay with real content: each is sent at
  its time × ``time_scale``; a later turn of a session follows the previous answer after the gap of their timestamps.

Output lengths, in order: the row's own ``max_tokens``; ``output_tokens`` when given; the length of the dataset's
reference answer (as vLLM's benchmark does); else :data:`DEFAULT_OUTPUT_TOKENS`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tailscope.errors import ProfileError
from tailscope.workload.arrivals import arrival_offsets_ns
from tailscope.workload.lengths import LengthDist
from tailscope.workload.simple import LoadShape
from tailscope.workload.spec import RequestSpec

DEFAULT_OUTPUT_TOKENS = 128
SAMPLES = ("random", "sequential")
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a conversation: its text (or chat), and what sets its length."""

    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None
    reference: str | None
    max_tokens: int | None
    request_class: str | None
    timestamp_s: float | None


Conversation = tuple[Turn, ...]


def output_tokens_for(turn: Turn, fixed: LengthDist | None, rng: random.Random, count: Callable[[str], int]) -> int:
    """``max_tokens`` of a turn (see the module docstring for the order)."""
    if turn.max_tokens is not None:
        return turn.max_tokens
    if fixed is not None:
        return fixed.sample(rng)
    if turn.reference:
        return count(turn.reference)
    return DEFAULT_OUTPUT_TOKENS


def _order(n: int, sample: str, rng: random.Random) -> Iterator[int]:
    """Conversation indices forever: file order, or one seeded permutation after another."""
    while True:
        idx = list(range(n))
        if sample == "random":
            rng.shuffle(idx)
        yield from idx


def dataset_requests(
    conversations: Sequence[Conversation],
    shape: LoadShape,
    *,
    seed: int,
    sample: str = "random",
    output_tokens: LengthDist | None = None,
    count: Callable[[str], int],
    time_scale: float = 1.0,
) -> Iterator[RequestSpec]:
    """The request stream of a dataset (see the module docstring).

    Args:
        shape: the load shape (untimed rows); its ``requests``/``duration_s`` bound timed rows too.
        output_tokens: an explicit ``max_tokens`` distribution (``--output-tokens``), else None.
        count: the token counter for prompt and reference texts.

    Raises:
        ProfileError: an unknown ``sample`` or an empty dataset.
    """
    if sample not in SAMPLES:
        raise ProfileError(f"--dataset-sample {sample!r}: use {' or '.join(SAMPLES)}")
    if not conversations:
        raise ProfileError("the dataset has no conversation left after the length filters")
    rng_len = random.Random(seed)
    timed = all(c[0].timestamp_s is not None for c in conversations)
    if timed:
        yield from _timed(conversations, shape, seed, output_tokens, count, time_scale, rng_len)
        return
    order = _order(len(conversations), sample, random.Random(seed ^ 0xDA7A))
    offsets: list[int] | None = None
    if shape.open_loop:
        assert shape.rate is not None
        offsets = arrival_offsets_ns(
            shape.arrival, shape.rate, random.Random(seed ^ 0x5EED_A77), count=shape.requests,
            duration_s=shape.duration_s, burstiness=shape.burstiness,
        )  # fmt: skip
    i = 0
    for k, ci in enumerate(order):
        if offsets is not None and k >= len(offsets):
            return
        conv = conversations[ci]
        session = f"d{k}" if len(conv) > 1 else None
        for t, turn in enumerate(conv):
            if shape.requests is not None and i >= shape.requests:
                return
            yield _spec(i, turn, seed, output_tokens, count, rng_len, session, t,
                        at_ns=(offsets[k] if offsets is not None else None) if t == 0 else None,
                        warmup=i < shape.warmup)  # fmt: skip
            i += 1


def _spec(
    i: int,
    turn: Turn,
    seed: int,
    fixed: LengthDist | None,
    count: Callable[[str], int],
    rng: random.Random,
    session: str | None,
    t: int,
    *,
    at_ns: int | None,
    warmup: bool,
    think_ns: int = 0,
) -> RequestSpec:
    text = "\n".join(c for _, c in turn.messages) if turn.messages is not None else (turn.prompt or "")
    return RequestSpec(
        id=i,
        input_tokens=count(text),
        output_tokens=output_tokens_for(turn, fixed, rng, count),
        at_ns=at_ns,
        request_class=turn.request_class or "default",
        session_id=session,
        turn=t if session is not None else None,
        think_time_ns=think_ns,
        warmup=warmup,
        seed=seed * 1_000_003 + i,
        prompt=turn.prompt if turn.messages is None else None,
        messages=turn.messages,
    )


def _timed(
    conversations: Sequence[Conversation],
    shape: LoadShape,
    seed: int,
    fixed: LengthDist | None,
    count: Callable[[str], int],
    time_scale: float,
    rng: random.Random,
) -> Iterator[RequestSpec]:
    if not time_scale > 0:
        raise ProfileError(f"--time-scale must be > 0 (got {time_scale!r}); 0.5 replays twice as fast")
    ordered = sorted(conversations, key=lambda c: c[0].timestamp_s or 0.0)
    i = 0
    for k, conv in enumerate(ordered):
        t0 = (conv[0].timestamp_s or 0.0) * time_scale
        if shape.duration_s is not None and t0 >= shape.duration_s:
            return
        session = f"d{k}" if len(conv) > 1 else None
        prev = conv[0].timestamp_s or 0.0
        for t, turn in enumerate(conv):
            if shape.requests is not None and i >= shape.requests:
                return
            ts = turn.timestamp_s if turn.timestamp_s is not None else prev
            think = round(max(0.0, ts - prev) * time_scale * _NS) if t else 0
            prev = ts
            yield _spec(i, turn, seed, fixed, count, rng, session, t, at_ns=round(t0 * _NS) if t == 0 else None,
                        warmup=i < shape.warmup, think_ns=think)  # fmt: skip
            i += 1
