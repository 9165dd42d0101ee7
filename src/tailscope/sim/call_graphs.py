"""Call graphs in the simulation: agent profiles and trace → load sessions whose calls carry ``step``, ``after`` or
their own ``at_ns``, run as the load generator runs them.

The session's first call is due at its arrival (closed loop: when its client is free); a call with ``after`` is due at
the latest ``predecessor end + gap`` (and no earlier than its own ``at_ns`` when it has one); a call depending on
nothing keeps its ``at_ns``. Calls with no path between them run concurrently. A call whose predecessor failed (or is
not in the session) is not sent, nor anything after it. A call's prompt is its own text plus the output tokens of its
``answers_from`` calls (sized in ``clients.py``). A closed-loop client runs a whole call graph: it is free when the
last call of the session has ended (or was dropped). With ``duration_s`` no call of a graph is sent after the stop
(the session is cut), as bench does.
"""

from __future__ import annotations

from tailscope.sim.events import SPEC_DUE
from tailscope.sim.state import CallGraphState, SessionState, SimState
from tailscope.workload.spec import RequestSpec

__all__ = ["CallGraphs"]


class CallGraphs(SimState):
    """Starting a call graph and releasing (or dropping) the calls that wait for one that ended."""

    def _graph_start(self, ses: SessionState, first: RequestSpec, now: int, client: int) -> CallGraphState:
        """The session's first call starts at ``now``: its other calls wait for their predecessors, or (depending
        on none) are due at their own ``at_ns`` (else with the first call)."""
        calls = list(ses.turns)
        ses.turns.clear()
        g = CallGraphState(waiting={}, deps_left={}, due={}, dependents={}, left=1 + len(calls))
        if first.step is not None and not first.warmup and first.session_id is not None:
            self.planned[first.session_id] = max(g.left, first.session_calls or 0)  # as drawn (see RequestSpec)
        ids = {first.id}
        dropped: set[int] = set()
        for c in calls:
            ids.add(c.id)
            if any(d not in ids or d in dropped for d, _ in c.after):
                dropped.add(c.id)  # a predecessor outside the session, or one never sent: never sent either
                g.left -= 1
                continue
            if not c.after:
                self._push(max(now, c.at_ns if c.at_ns is not None else now), SPEC_DUE, (c, client))
                continue
            g.waiting[c.id] = c
            g.deps_left[c.id] = len(c.after)
            g.due[c.id] = c.at_ns or 0
            for d, gap in c.after:
                g.dependents.setdefault(d, []).append((c.id, gap))
        return g

    def _graph_end(
        self, ses: SessionState, g: CallGraphState, spec: RequestSpec, now: int, end: int | None, output: int
    ) -> None:
        """A call ended at ``end`` with ``output`` tokens (``end`` None: it failed): release or drop the calls that
        wait for it."""
        g.left -= 1
        fail: list[int] = []
        if end is None:
            fail.append(spec.id)
        else:
            g.outputs[spec.id] = output
            for rid, gap in g.dependents.pop(spec.id, ()):
                if rid not in g.waiting:
                    continue
                t = end + gap
                if t > g.due[rid]:
                    g.due[rid] = t
                g.deps_left[rid] -= 1
                if g.deps_left[rid] == 0:
                    call = g.waiting.pop(rid)
                    due = g.due.pop(rid)
                    del g.deps_left[rid]
                    self._push(due if due > now else now, SPEC_DUE, (call, ses.client))
        while fail:  # a failed call's dependents are never sent, nor theirs
            for rid, _ in g.dependents.pop(fail.pop(), ()):
                if g.waiting.pop(rid, None) is not None:
                    del g.deps_left[rid], g.due[rid]
                    g.left -= 1
                    fail.append(rid)
