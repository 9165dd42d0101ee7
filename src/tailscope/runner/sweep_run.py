"""Sweeps and capacity search over real bench runs (``bench --sweep`` / ``bench --find-max``).

The pure logic (points, knee, bracket + bisection) lives in :mod:`tailscope.workload.sweep`; this module drives it
with one real bench run per point. Every point is its own run in the store, linked to the others by a ``sweep_id``.
``build(param, value)`` resolves the config and request stream of one point (the CLI resolves flags and profiles);
``execute(cfg, specs, progress)`` runs it and returns its :class:`~tailscope.runner.bench_result.BenchResult` — so the
caller decides about event loops and live progress, and tests can drive it directly.

A capacity-search probe passes (:func:`probe_passed`) when the run completed, every SLO verdict passed, at most
:data:`MAX_FAILED_FRACTION` of its requests failed or were cut off, and no steady stage was over-saturated (TTFT
still growing at the end of a short probe means a longer run at that rate would fail its SLO).

A point or probe in which the target answered none of its requests — every one refused, or without a first token
within the first-token timeout (:func:`silent_target`) — ends the sweep or the search (``stopped`` says why): the
server is down or stuck, and every further point would only wait out the same timeouts (a capacity search halves its
rate down to 1/64 of the start, ≈ 7 probes of the timeout each).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tailscope.errors import TargetError
from tailscope.metrics.document import clean_json
from tailscope.records import ErrorClass, RunStatus
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.progress import Progress
from tailscope.workload.spec import RequestSpec
from tailscope.workload.sweep import FindMaxResult, SweepSpec, find_max, knee_of

#: a probe with more failed or incomplete requests than this fraction fails, whatever its percentiles say.
MAX_FAILED_FRACTION = 0.01

#: the failures of a target that does not answer at all: refused or timed-out connections, no first token in time
SILENT_ERRORS = frozenset({ErrorClass.CONNECT, ErrorClass.TIMEOUT_CONNECT, ErrorClass.TIMEOUT_FIRST_TOKEN})


def _raise_if_stopped(stopped: str | None, runs: int) -> None:
    if stopped is not None:
        raise TargetError(f"{stopped} ({runs} run(s) kept)")


def silent_target(res: BenchResult) -> str | None:
    """Why ``res`` says its target has stopped answering (None when it answered at least one request, or failed
    otherwise: HTTP errors, broken streams and SLO misses are answers): no request completed and every failure is in
    :data:`SILENT_ERRORS`."""
    s = res.summary
    if res.signal_name or s.requests.total == 0 or s.requests.completed > 0 or not s.errors:
        return None
    if not all(kind in SILENT_ERRORS for kind in s.errors):
        return None
    kinds = ", ".join(f"{k}={n}" for k, n in sorted(s.errors.items()))
    return (
        f"the target answered none of the {s.requests.total} requests of run {res.run.id} ({kinds}): it is down or "
        "stuck; check the server (a server slower than --timeout-first-token at this load needs a longer timeout)"
    )


Build = Callable[[str, float], tuple[BenchConfig, Iterator[RequestSpec], Progress]]
Execute = Callable[[BenchConfig, Iterator[RequestSpec], Progress], BenchResult]


def new_sweep_id() -> str:
    """Sortable, unique sweep id: ``sw-YYYYmmdd-HHMMSS-xxxxxx``."""
    return "sw-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


@dataclass(frozen=True, slots=True)
class PointRun:
    """One measured point of a sweep or search: the load (concurrency or requests/s) and its run."""

    param: str
    load: float
    result: BenchResult
    phase: str = "point"  # point (sweep) | bracket | bisect | repeat (search)
    passed: bool | None = None  # search probes only

    def row(self) -> dict[str, Any]:
        """The point as one table/JSON row (latencies in ms, rates per second)."""
        s = self.result.summary
        return {
            "param": self.param,
            "load": self.load,
            "phase": self.phase,
            "passed": self.passed,
            "run_id": self.result.run.id,
            "status": self.result.status.value,
            "completed": s.requests.completed,
            "failed": s.requests.failed + s.requests.incomplete,
            "requests_per_s": s.requests_per_s,
            "output_tokens_per_s": s.output_tokens_per_s,
            "goodput_rps": s.goodput_rps,
            "ttft_p50_ms": s.ttft_ms.p50,
            "ttft_p99_ms": s.ttft_ms.p99,
            "tpot_p50_ms": s.tpot_ms.p50,
            "tpot_p99_ms": s.tpot_ms.p99,
            "e2e_p50_ms": s.e2e_ms.p50,
            "e2e_p99_ms": s.e2e_ms.p99,
            "slo_passed": all(r.passed for r in s.slo) if s.slo else None,
            "saturated": any(w.startswith("OVER-SATURATED") for w in s.warnings),
            "reason": probe_verdict(self.result) if self.passed is False else None,
        }


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    """A finished (or interrupted) sweep.

    Attributes:
        knee: index into ``points`` of the knee (``find_knee`` on requests/s vs E2E p50), or None.
        interrupted: a signal stopped the sweep; ``points`` holds what was measured.
        stopped: why the sweep ended where it did when the target stopped answering (:func:`silent_target`), else
            None.
    """

    sweep_id: str
    param: str
    points: tuple[PointRun, ...]
    knee: int | None
    interrupted: bool = False
    stopped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id,
            "param": self.param,
            "points": [p.row() for p in self.points],
            "knee": None if self.knee is None else {"index": self.knee, "load": self.points[self.knee].load},
            "interrupted": self.interrupted,
            "stopped": self.stopped,
        }

    def raise_if_stopped(self) -> None:
        """Raise :class:`~tailscope.errors.TargetError` with :attr:`stopped` when the target stopped answering."""
        _raise_if_stopped(self.stopped, len(self.points))

    def export(self) -> dict[str, Any]:
        """The ``bench --sweep --json`` document: the sweep, then each point's load, run and summary."""
        doc: dict[str, Any] = clean_json(
            {"sweep": self.to_dict(), "runs": [{"load": p.load, **p.result.brief()} for p in self.points]}
        )
        return doc


def knee_index(points: list[PointRun]) -> int | None:
    """The knee of measured points (:func:`tailscope.workload.sweep.knee_of`: requests/s against E2E p50)."""
    return knee_of([(p.load, p.result.summary.requests_per_s, p.result.summary.e2e_ms.p50) for p in points])


def run_sweep(spec: SweepSpec, build: Build, execute: Execute, *, sweep_id: str | None = None) -> SweepOutcome:
    """Run every point of ``spec`` in order, each as its own run linked by the sweep id.

    Stops early when a point was stopped by SIGINT/SIGTERM (``interrupted``) or when the target answered none of a
    point's requests (``stopped``, :func:`silent_target`).
    """
    sid = sweep_id or new_sweep_id()
    points: list[PointRun] = []
    values = spec.as_ints() if spec.param == "concurrency" else spec.values
    for v in values:
        cfg, specs, progress = build(spec.param, float(v))
        res = execute(replace(cfg, sweep_id=sid), specs, progress)
        points.append(PointRun(spec.param, float(v), res))
        if res.signal_name:
            return SweepOutcome(sid, spec.param, tuple(points), knee_index(points), interrupted=True)
        silent = silent_target(res)
        if silent is not None:
            return SweepOutcome(sid, spec.param, tuple(points), knee_index(points), stopped=silent)
    return SweepOutcome(sid, spec.param, tuple(points), knee_index(points))


def probe_verdict(res: BenchResult) -> str | None:
    """Why a capacity-search probe failed (see the module docstring for the rule), or None when it passed."""
    s = res.summary
    if res.status is not RunStatus.COMPLETE:
        return f"run {res.status.value}"
    if s.requests.total == 0:
        return "no request measured"
    missed = [r for r in s.slo if not r.passed]
    if missed:
        r = missed[0]
        seen = "∞" if r.observed_ms is None or r.observed_ms == float("inf") else f"{r.observed_ms:,.0f} ms"
        return f"SLO {r.slo.key} {seen} > {r.slo.threshold_ms:,.0f} ms"
    bad = s.requests.failed + s.requests.incomplete
    if bad > MAX_FAILED_FRACTION * s.requests.total:
        return f"{bad} of {s.requests.total} requests failed or cut off"
    if any(w.startswith("OVER-SATURATED") for w in s.warnings):
        return "over-saturated (TTFT still growing at the end)"
    return None


def probe_passed(res: BenchResult) -> bool:
    """Whether a capacity-search probe met the SLO."""
    return probe_verdict(res) is None


@dataclass(frozen=True, slots=True)
class FindMaxOutcome:
    """A finished (or interrupted) capacity search: the answer, and every probe as a run."""

    sweep_id: str
    result: FindMaxResult | None
    probes: tuple[PointRun, ...] = field(default_factory=tuple)
    interrupted: bool = False
    stopped: str | None = None  # the target stopped answering (:func:`silent_target`); ``result`` is then None

    def describe(self) -> str:
        if self.stopped is not None:
            return f"search stopped after {len(self.probes)} runs: {self.stopped}"
        if self.result is None:
            return f"search interrupted after {len(self.probes)} runs"
        return self.result.describe()

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "sweep_id": self.sweep_id,
            "rate": r.rate if r else None,
            "lower": r.lower if r else None,
            "upper": r.upper if r else None,
            "uncertainty": r.uncertainty if r else None,
            "description": self.describe(),
            "probes": [p.row() for p in self.probes],
            "interrupted": self.interrupted,
            "stopped": self.stopped,
        }

    def raise_if_stopped(self) -> None:
        """Raise :class:`~tailscope.errors.TargetError` with :attr:`stopped` when the target stopped answering."""
        _raise_if_stopped(self.stopped, len(self.probes))

    def export(self) -> dict[str, Any]:
        """The ``bench --find-max --json`` document: the search, then each probe's load, run and summary."""
        doc: dict[str, Any] = clean_json(
            {"find_max": self.to_dict(), "runs": [{"load": p.load, **p.result.brief()} for p in self.probes]}
        )
        return doc


class _Interrupted(Exception):
    pass


class _Silent(Exception):
    pass


def run_find_max(
    build: Build,
    execute: Execute,
    *,
    start: float = 1.0,
    max_rate: float = 10_000.0,
    rel_tol: float = 0.05,
    repeats: int = 1,
    sweep_id: str | None = None,
) -> FindMaxOutcome:
    """Search the highest open-loop rate whose run meets the SLO (bracket, bisect, repeat at the boundary).

    Args:
        build: resolves one probe at ``("rate", rate)``.
        execute: runs a probe.
        start: first rate (requests/s).
        max_rate: never probe above this.
        rel_tol: stop when the bracket is within this fraction of its lower end.
        repeats: re-measurements of the boundary.
    """
    sid = sweep_id or new_sweep_id()
    probes: list[PointRun] = []

    def measure(rate: float) -> tuple[bool, Any]:
        cfg, specs, progress = build("rate", rate)
        res = execute(replace(cfg, sweep_id=sid, probe="find-max"), specs, progress)
        ok = probe_passed(res)
        probes.append(PointRun("rate", rate, res, phase="probe", passed=ok))
        if res.signal_name:
            raise _Interrupted
        silent = silent_target(res)
        if silent is not None:
            raise _Silent(silent)
        return ok, res.run.id

    try:
        result = find_max(measure, start=start, max_rate=max_rate, rel_tol=rel_tol, repeats=repeats)
    except _Interrupted:
        return FindMaxOutcome(sid, None, tuple(probes), interrupted=True)
    except _Silent as why:
        return FindMaxOutcome(sid, None, tuple(probes), stopped=str(why))
    # label each probe with the phase the search gave it
    labelled = tuple(replace(p, phase=q.phase) for p, q in zip(probes, result.probes, strict=True))
    return FindMaxOutcome(sid, result, labelled)
