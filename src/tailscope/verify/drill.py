"""Degradation drills, the pure part: the drill's description, the windows before, during and after a fault, the
recovery point and the judgement of the expectations.

A drill (``tailscope drill DRILL.yaml``, :func:`tailscope.drill`) runs a bounded load, switches a fault on at
``at_s`` for ``for_s`` and measures. Here the requests (by the time they were sent, relative to the load's start) are
cut into three windows — ``before`` ``[0, at)``, ``during`` ``[at, end)``, ``after`` ``[end, load end)`` — and the
after-window into steps of ``step_s``: the drill has **recovered** at the start of the first step whose error rate
and E2E p95 are back within the before-window's bounds (error rate ≤ the before-window's + ``error_tolerance``, p95 ≤
the before-window's × (1 + ``p95_tolerance``)). Nothing here opens a socket or a file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.metrics.percentiles import quantile
from tailscope.metrics.request import e2e_ms, ttft_ms
from tailscope.record_ops import FieldsDocument
from tailscope.records import RequestRecord, Status

#: The faults the reference application switches through ``POST /admin/faults`` (``tailscope app``).
APP_FAULTS: tuple[str, ...] = ("llm-down", "llm-slow", "retrieval-down", "db-slow")
#: The kind of a fault applied as a rule of ``tailscope proxy`` (through its admin API).
PROXY_KIND = "proxy"


@dataclass(frozen=True, slots=True)
class DrillLoad:
    """The bounded load: ``rate`` requests/s (Poisson) for ``duration_s``, or a workload profile."""

    duration_s: float
    rate: float | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    profile: str | None = None  # a profile file (relative paths resolved against the drill file)
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class DrillFault:
    """What breaks, when and for how long.

    ``kind`` is one of :data:`APP_FAULTS` (switched through ``admin`` — default: the target's URL — with
    ``POST /admin/faults``) or ``proxy``: ``rule`` (a ``tailscope proxy`` rule, as JSON) is posted to the proxy's admin
    API ``proxy`` at the start and deleted at the end.
    """

    at_s: float
    for_s: float
    kind: str
    admin: str | None = None
    proxy: str | None = None
    rule: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        return self.at_s + self.for_s


@dataclass(frozen=True, slots=True)
class DrillExpect:
    """What must hold. Latency and error limits are judged over the whole drill (``scope: all``) or the fault window
    only (``scope: during``); ``recovered_within_s`` from the fault's end; ``fallback_min`` counts the fallback answers
    the application reported during the fault (``/admin/state``)."""

    error_rate_max: float | None = None
    e2e_p95_max_ms: float | None = None
    ttft_p95_max_ms: float | None = None
    recovered_within_s: float | None = None
    fallback_min: int | None = None
    scope: str = "all"  # all | during


@dataclass(frozen=True, slots=True)
class DrillSpec:
    """A drill file, validated (:func:`tailscope.io.drill.load_drill`)."""

    name: str
    url: str
    load: DrillLoad
    fault: DrillFault
    expect: DrillExpect
    endpoint: str = "chat"
    model: str | None = None
    step_s: float = 1.0
    p95_tolerance: float = 0.5
    error_tolerance: float = 0.01
    source: str = "<drill>"


@dataclass(frozen=True, slots=True)
class Window:
    """The requests sent in ``[start_s, end_s)`` (seconds since the load's start) and their figures."""

    name: str
    start_s: float
    end_s: float
    requests: int
    failed: int
    e2e_p95_ms: float | None
    ttft_p95_ms: float | None
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "requests": self.requests,
            "failed": self.failed,
            "error_rate": round(self.error_rate, 4),
            "e2e_p95_ms": None if self.e2e_p95_ms is None else round(self.e2e_p95_ms, 1),
            "ttft_p95_ms": None if self.ttft_p95_ms is None else round(self.ttft_p95_ms, 1),
            "errors": dict(self.errors),
        }


@dataclass(frozen=True, slots=True)
class DrillCheck(FieldsDocument):
    """One expectation: its name, limit, what was observed and whether it held (``None``: could not be judged)."""

    name: str
    limit: float
    observed: float | None
    passed: bool
    detail: str


def _sent_s(r: RequestRecord) -> float:
    return (r.sent_ns if r.sent_ns is not None else r.scheduled_ns) / 1e9


def window(records: Sequence[RequestRecord], name: str, start_s: float, end_s: float) -> Window:
    """The window of the requests sent in ``[start_s, end_s)`` (warmup and requests still in flight left out)."""
    inside = [
        r for r in records if not r.warmup and r.status is not Status.INCOMPLETE and start_s <= _sent_s(r) < end_s
    ]
    ok = [r for r in inside if r.status is Status.OK]
    e2e = [v for v in (e2e_ms(r) for r in ok) if v is not None]
    ttft = [v for v in (ttft_ms(r) for r in ok) if v is not None]
    errors: dict[str, int] = {}
    for r in inside:
        if r.status is Status.ERROR:
            key = r.error.value if r.error is not None else "other"
            errors[key] = errors.get(key, 0) + 1
    return Window(
        name,
        start_s,
        end_s,
        len(inside),
        sum(1 for r in inside if r.status is Status.ERROR),
        quantile(e2e, 0.95) if e2e else None,
        quantile(ttft, 0.95) if ttft else None,
        errors,
    )


def phases(
    records: Sequence[RequestRecord], fault_start_s: float, fault_end_s: float, load_end_s: float
) -> tuple[Window, Window, Window]:
    """The ``before``, ``during`` and ``after`` windows of a drill (times since the load's start, as measured)."""
    return (
        window(records, "before", 0.0, fault_start_s),
        window(records, "during", fault_start_s, fault_end_s),
        window(records, "after", fault_end_s, max(load_end_s, fault_end_s) + 1e-9),
    )


def within_bounds(w: Window, before: Window, *, p95_tolerance: float, error_tolerance: float) -> bool:
    """Whether a window's error rate and E2E p95 are back within the before-window's bounds."""
    if w.requests == 0:
        return False
    if w.error_rate > before.error_rate + error_tolerance:
        return False
    if before.e2e_p95_ms is None or w.e2e_p95_ms is None:
        return w.e2e_p95_ms is not None or before.e2e_p95_ms is None
    return w.e2e_p95_ms <= before.e2e_p95_ms * (1.0 + p95_tolerance)


def recovery_s(
    records: Sequence[RequestRecord],
    before: Window,
    fault_end_s: float,
    load_end_s: float,
    *,
    step_s: float,
    p95_tolerance: float,
    error_tolerance: float,
) -> tuple[float | None, list[Window]]:
    """Seconds from the fault's end to the start of the first step back within bounds (None: never), and the steps."""
    steps: list[Window] = []
    t = fault_end_s
    found: float | None = None
    while t < load_end_s - 1e-9:
        w = window(records, f"after+{t - fault_end_s:.1f}s", t, min(t + step_s, load_end_s + 1e-9))
        steps.append(w)
        if found is None and within_bounds(w, before, p95_tolerance=p95_tolerance, error_tolerance=error_tolerance):
            found = t - fault_end_s
        t += step_s
    return found, steps


def judge(
    expect: DrillExpect,
    *,
    whole: Window,
    during: Window,
    recovered_s: float | None,
    fallbacks: int | None,
    timing: bool = True,
) -> list[DrillCheck]:
    """The expectations' checks. ``timing=False`` leaves the latency and recovery checks out (a busy machine)."""
    scope = during if expect.scope == "during" else whole
    where = "during the fault" if expect.scope == "during" else "over the drill"
    checks: list[DrillCheck] = []
    if expect.error_rate_max is not None:
        rate = scope.error_rate
        checks.append(
            DrillCheck(
                "error_rate_max",
                expect.error_rate_max,
                round(rate, 4),
                rate <= expect.error_rate_max,
                f"{scope.failed} of {scope.requests} requests failed {where} ({rate:.1%})",
            )
        )
    for name, limit, value in (
        ("e2e_p95_max_ms", expect.e2e_p95_max_ms, scope.e2e_p95_ms),
        ("ttft_p95_max_ms", expect.ttft_p95_max_ms, scope.ttft_p95_ms),
    ):
        if limit is None or not timing:
            continue
        label = name.removesuffix("_max_ms").replace("_", " ").upper()
        if value is None:
            checks.append(DrillCheck(name, limit, None, False, f"no successful request {where}: no {label}"))
        else:
            checks.append(DrillCheck(name, limit, round(value, 1), value <= limit, f"{label} {value:.0f} ms {where}"))
    if expect.recovered_within_s is not None and timing:
        if recovered_s is None:
            checks.append(
                DrillCheck(
                    "recovered_within_s",
                    expect.recovered_within_s,
                    None,
                    False,
                    "no window after the fault came back within the before-window's bounds",
                )
            )
        else:
            checks.append(
                DrillCheck(
                    "recovered_within_s",
                    expect.recovered_within_s,
                    round(recovered_s, 3),
                    recovered_s <= expect.recovered_within_s,
                    f"back within the before-window's bounds {recovered_s:.1f} s after the fault's end",
                )
            )
    if expect.fallback_min is not None:
        n = fallbacks or 0
        checks.append(
            DrillCheck(
                "fallback_min",
                expect.fallback_min,
                None if fallbacks is None else n,
                fallbacks is not None and n >= expect.fallback_min,
                f"{n} fallback answers" if fallbacks is not None else "the target has no fallback counter",
            )
        )
    return checks
