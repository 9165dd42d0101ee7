"""Verify a fallback under load: :func:`drill` (and :func:`drill_async`) runs a degradation drill and judges it.

A drill is a bounded load against a target while a fault is on for a while (the reference application's
``llm-down``, ``llm-slow``, ``retrieval-down``, ``db-slow``, or any ``tailscope proxy`` rule); the result holds the
windows before, during and after the fault, the recovery, the fault timeline and the checks of the expectations::

    result = tailscope.drill("drills/llm-down.yaml", store=".tailscope/tailscope.duckdb")
    print(result.passed, result.during.error_rate, result.recovery_s)

With ``store=`` the load is kept as a run tagged ``drill`` whose summary carries the drill (``summary["drill"]``),
which ``tailscope report`` draws as the fault timeline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailscope.api._support import StorePath, open_store, public, sync_twin
from tailscope.metrics.summary import RunSummary
from tailscope.runner.progress import Progress
from tailscope.store.runs import RunStore
from tailscope.verify.drill import DrillCheck, DrillSpec, Window, judge, phases, recovery_s, window

#: The tag of every stored drill run (``runs list --tag drill``, ``latest:drill``).
DRILL_TAG = "drill"


@dataclass(frozen=True, slots=True)
class DrillEvent:
    """One point of the fault timeline, in seconds since the load's start."""

    t_s: float
    event: str  # fault-start | fallback-engaged | fault-end | recovered
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 3), "event": self.event, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class DrillResult:
    """A judged drill.

    Attributes:
        before / during / after: the three windows (requests by the time they were sent).
        steps: the after-window cut in ``recovery.step_s`` steps (the recovery is the first step back within bounds).
        recovery_s: seconds from the fault's end to the recovery (None: not within the drill).
        fallbacks: fallback answers the application reported during the drill (None: not an app, or no counters).
        checks: one per expectation; ``passed`` when all hold (and the fault was switched as planned).
        timing_judged: False when the latency and recovery checks were left out (``timing=False``).
        run_id: the stored run (None without a store).
    """

    name: str
    spec: DrillSpec
    before: Window
    during: Window
    after: Window
    whole: Window
    steps: tuple[Window, ...]
    recovery_s: float | None
    timeline: tuple[DrillEvent, ...]
    fallbacks: int | None
    checks: tuple[DrillCheck, ...]
    summary: RunSummary
    timing_judged: bool = True
    run_id: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when every expectation holds, 1 otherwise (as ``tailscope gate``)."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        f = self.spec.fault
        return {
            "name": self.name,
            "passed": self.passed,
            "target": self.spec.url,
            "fault": {"kind": f.kind, "at_s": f.at_s, "for_s": f.for_s, **({"rule": dict(f.rule)} if f.rule else {})},
            "windows": [w.to_dict() for w in (self.before, self.during, self.after)],
            "whole": self.whole.to_dict(),
            "steps": [w.to_dict() for w in self.steps],
            "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 3),
            "timeline": [e.to_dict() for e in self.timeline],
            "fallbacks": self.fallbacks,
            "checks": [c.to_dict() for c in self.checks],
            "timing_judged": self.timing_judged,
            "problems": list(self.problems),
            "run_id": self.run_id,
        }


def _spec_of(drill_spec: DrillSpec | str | os.PathLike[str] | Mapping[str, Any]) -> DrillSpec:
    if isinstance(drill_spec, DrillSpec):
        return drill_spec
    if isinstance(drill_spec, Mapping):
        from tailscope.io.drill import drill_from_dict

        return drill_from_dict(dict(drill_spec))
    from tailscope.io.drill import load_drill

    return load_drill(Path(drill_spec))


@public
async def drill_async(
    drill_spec: DrillSpec | str | os.PathLike[str] | Mapping[str, Any],
    *,
    url: str | None = None,
    store: StorePath | RunStore | None = None,
    seed: int | None = None,
    timing: bool = True,
    progress: Progress | None = None,
) -> DrillResult:
    """Run a degradation drill and judge its expectations.

    Args:
        drill_spec: a drill file, a dict of the file's shape or a :class:`~tailscope.verify.drill.DrillSpec`.
        url: the target's URL instead of the file's ``target.url`` (an app started on a free port).
        store: keep the load as a run tagged ``drill`` (with the drill in its summary); None writes nothing.
        seed: the load's seed.
        timing: False leaves the latency and recovery checks out (a machine too busy to judge time).
        progress: live counters of the load.

    Raises:
        ConfigError: a bad drill file (``file:line: field …``) or load. TargetError: the target or the fault's switch
            does not answer (before any load is sent).
    """
    from dataclasses import replace

    from tailscope.runner.drill import run_drill

    spec = _spec_of(drill_spec)
    if url is not None:
        spec = replace(spec, url=url.rstrip("/"))
    rs = open_store(store)
    ran = await run_drill(spec, store=rs, seed=seed, progress=progress)
    bench, tl = ran.bench, ran.timeline
    t0 = bench.t0_ns
    records = bench.records
    load_end_s = max([spec.load.duration_s] + [(r.sent_ns or r.scheduled_ns) / 1e9 for r in records])
    problems = list(tl.errors)
    if tl.start_ns is None:
        problems.append("the fault was never switched on (the load ended before fault.at_s?)")
    start_s = (tl.start_ns - t0) / 1e9 if tl.start_ns is not None else spec.fault.at_s
    end_s = (tl.end_ns - t0) / 1e9 if tl.end_ns is not None else start_s + spec.fault.for_s
    before, during, after = phases(records, start_s, end_s, load_end_s)
    whole = window(records, "all", 0.0, load_end_s + 1e-9)
    rec, steps = recovery_s(
        records,
        before,
        end_s,
        load_end_s,
        step_s=spec.step_s,
        p95_tolerance=spec.p95_tolerance,
        error_tolerance=spec.error_tolerance,
    )
    fallbacks: int | None = None
    if ran.state_before is not None and ran.state_after is not None:
        fallbacks = int(ran.state_after.get("fallbacks", 0)) - int(ran.state_before.get("fallbacks", 0))
    events = [DrillEvent(start_s, "fault-start", spec.fault.kind)]
    if tl.fallback_ns is not None:
        events.append(DrillEvent((tl.fallback_ns - t0) / 1e9, "fallback-engaged", f"{fallbacks or 0} fallback answers"))
    events.append(DrillEvent(end_s, "fault-end", spec.fault.kind))
    if rec is not None:
        events.append(DrillEvent(end_s + rec, "recovered", f"{rec:.1f} s after the fault's end"))
    checks = judge(spec.expect, whole=whole, during=during, recovered_s=rec, fallbacks=fallbacks, timing=timing)
    result = DrillResult(
        name=spec.name,
        spec=spec,
        before=before,
        during=during,
        after=after,
        whole=whole,
        steps=tuple(steps),
        recovery_s=rec,
        timeline=tuple(sorted(events, key=lambda e: e.t_s)),
        fallbacks=fallbacks,
        checks=tuple(checks),
        summary=bench.summary,
        timing_judged=timing,
        run_id=bench.run.id if rs is not None else None,
        problems=tuple(problems),
    )
    if rs is not None:
        rs.tag(bench.run.id, DRILL_TAG)
        rs.annotate_summary(bench.run.id, "drill", result.to_dict())
    return result


drill = sync_twin(drill_async)
