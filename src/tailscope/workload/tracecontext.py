"""W3C trace context for a request stream: which requests carry a ``traceparent`` and with which ids.

The ids are drawn once per request while the stream is produced (never on the send path): a 128-bit trace id and a
64-bit client span id, both from an injected generator so a test can fix them. Which requests are traced is drawn
from the run's seed alone, so a ratio below 1 traces the same requests on every run with that seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

from tailscope.errors import ConfigError
from tailscope.workload.spec import RequestSpec

_SAMPLE_SALT = 0x7472_6163_6563_7478  # keeps the sampling draws apart from the workload's other seeded draws


def parse_trace_context(value: str | float | bool | None) -> float:
    """The share of requests to trace: ``off``/``False`` → 0, ``on``/``True`` → 1, a ratio in (0, 1] as is.

    Raises:
        ConfigError: naming ``--trace-context`` and the accepted values.
    """
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("off", "no", "false", "0"):
            return 0.0
        if text in ("on", "yes", "true", "all"):
            return 1.0
        try:
            ratio = float(text)
        except ValueError:
            raise ConfigError(f"--trace-context {value!r}: use on, off or a ratio in (0, 1] such as 0.1") from None
    else:
        ratio = float(value)
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"--trace-context {value!r}: a ratio must lie in (0, 1] (0 = off)")
    return ratio


def check_tracestate(value: str | None) -> str | None:
    """``value`` when it is a plausible W3C ``tracestate`` (printable ASCII, ≤ 512 characters), else ConfigError."""
    if value is None or value == "":
        return None
    if len(value) > 512 or not value.isascii() or not value.isprintable() or "=" not in value:
        raise ConfigError(
            f"--tracestate {value[:40]!r}: expected W3C list members like 'vendor=value' (ASCII, at most 512 chars)"
        )
    return value


def _hex_id(rng: random.Random, bits: int) -> str:
    v = 0
    while v == 0:  # an all-zero id is invalid in W3C trace context
        v = rng.getrandbits(bits)
    return f"{v:0{bits // 4}x}"


def with_trace_context(
    specs: Iterator[RequestSpec], ratio: float, *, seed: int, ids: random.Random
) -> Iterator[RequestSpec]:
    """``specs`` with ``trace_id``/``span_id`` set on a ``ratio`` share of them (all when ``ratio >= 1``).

    Args:
        ratio: share of requests to trace, in [0, 1].
        seed: the run's seed: which requests are sampled depends on it (and on the request order) only.
        ids: where trace and span ids come from (fresh per run in production, fixed in tests).
    """
    if ratio <= 0:
        yield from specs
        return
    sampler = random.Random(seed ^ _SAMPLE_SALT)
    for spec in specs:
        if ratio >= 1.0 or sampler.random() < ratio:
            yield replace(spec, trace_id=_hex_id(ids, 128), span_id=_hex_id(ids, 64))
        else:
            yield spec
