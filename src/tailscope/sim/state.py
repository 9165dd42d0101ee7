"""What a simulation holds: the state of its requests, sessions and replica slots, and :class:`SimState`, the
attributes every part of :class:`~tailscope.sim.simulator.Simulation` reads.

The simulation is one object assembled from one class per concept (``simulator.py`` the event loop and the engine
steps, ``clients.py`` the request stream, sessions and closed-loop clients, ``call_graphs.py`` agent call graphs,
``routing.py`` the router and the API-server front end, ``disagg.py`` the prefill → decode hand-off,
``autoscaling.py`` the autoscaler and the timeline); :class:`SimState` declares what they share, so each part can be
read and type-checked on its own.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.autoscaler import Autoscaler, FragmentationModel
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.desync import Desync
from tailscope.engine.disagg import KvTransfer
from tailscope.engine.perf import StepModel
from tailscope.engine.replica import Completion, Replica
from tailscope.engine.router import Router
from tailscope.records import RequestRecord
from tailscope.sim.records import record_error
from tailscope.sim.result import SimResult
from tailscope.workload.spec import RequestSpec

__all__ = ["CallGraphState", "LiveRequest", "ReplicaSlot", "SessionState", "SimState"]


@dataclass(slots=True)
class CallGraphState:
    """A call-graph session's state once its first call started."""

    waiting: dict[int, RequestSpec]  # calls whose predecessors have not all ended, by id
    deps_left: dict[int, int]  # id → predecessors still to end
    due: dict[int, int]  # id → the latest predecessor end + gap so far (its own ``at_ns`` at least)
    dependents: dict[int, list[tuple[int, int]]]  # id → (dependent id, gap ns)
    outputs: dict[int, int] = field(default_factory=dict)  # output tokens of the calls that ended
    left: int = 0  # calls not yet ended or dropped


@dataclass(slots=True)
class SessionState:
    """A session (a conversation, or a call graph) from its first request to its last."""

    chain: list[int]
    history: int = 0  # tokens of earlier prompts + outputs
    turns: deque[RequestSpec] = field(default_factory=deque)
    client: int = -1
    call_graph: bool = False  # its calls follow ``after`` (a call graph), not one another (a conversation)
    graph: CallGraphState | None = None


@dataclass(slots=True)
class LiveRequest:
    """A request from the moment it is due until its record is made."""

    spec: RequestSpec
    scheduled_ns: int
    prompt: int
    replica: int = -1
    client: int = -1
    hashes: tuple[int, ...] = ()
    sent_ns: int | None = None  # later than scheduled_ns when the twin models the client's open-loop send lag
    decoding: bool = False  # disaggregated: the request has left the prefill pool


@dataclass(slots=True)
class ReplicaSlot:
    """One replica of the deployment with what the simulator knows about it beyond its engine."""

    replica: Replica
    state: str = "ready"  # pending | ready | draining | stopped
    busy: bool = False
    outstanding: int = 0
    frontend_free_ns: int = 0
    created_ns: int = 0  # when the replica was requested (GPUs are paid from then on)
    stopped_ns: int | None = None
    busy_ns: int = 0  # time spent running engine steps (the autoscaler's gpu_util)
    busy_mark_ns: int = 0  # busy_ns at the previous scrape
    pending_done: list[Completion] = field(default_factory=list)
    tp: int = 1  # GPUs of the replica (GPU-seconds)
    pool: str = "agg"  # agg | prefill | decode
    replaces: int | None = None  # a rebuild: the slot this one retires once it is ready


class SimState:
    """The attributes the parts of a simulation share (set by ``Simulation.__init__``), the event heap's push, and
    the few methods one part calls in another."""

    cluster: ClusterSpec
    concurrency: int | None
    result: SimResult
    #: agent sessions (calls with a step name) that started, with their planned calls (as the load generator)
    planned: dict[str, int]
    #: request id → agent step name, for the calls started
    step_names: dict[int, str]
    # the workload
    _specs: Iterator[RequestSpec]
    _peek: RequestSpec | None
    _exhausted: bool
    _stop_ns: int | None
    _horizon_ns: int | None
    _ramp_ns: int | None
    _desync: Desync
    _gap: Callable[[], int] | None
    _live: dict[int, LiveRequest]
    _sessions: dict[str, SessionState]
    _prefix_chains: dict[int, list[int]]
    _open_plain: bool
    _live_at_horizon: bool
    # the deployment
    _perf: StepModel
    _speed: Callable[[int], float] | None
    _burst: Callable[[int, int], int] | None
    _pd_burst: Callable[[float, int], int] | None
    _engine_wait: Callable[..., int] | None  # (in_flight, prompt tokens, *, prefill_pool) → ns
    _prefill_pool: bool  # the router's replicas are a disaggregated prefill pool
    _pickup: Callable[[int, int], int] | None  # a decode worker's (in_flight, prompt tokens) → ns
    _send_lag: Callable[[int, int], int] | None
    _block: int
    _router: Router
    _slots: list[ReplicaSlot]
    _entry: list[int] | None
    _decode_idx: list[int]
    _xfer: KvTransfer
    # autoscaling and the timeline
    _scaler: Autoscaler | None
    _frag: FragmentationModel | None
    _rebuilding: int
    _max_request_blocks: int
    _ttft_window: deque[tuple[int, float]]
    _win_ttfts: list[float]
    _win_completed: int
    # the event heap of ``(time_ns, priority, seq, payload)`` (see :mod:`tailscope.sim.events`), kept inline:
    # pushing and popping are the simulator's most frequent operations
    _heap: list[tuple[int, int, int, Any]]
    _seq: itertools.count[int]

    def _push(self, time_ns: int, priority: int, payload: Any) -> None:
        heapq.heappush(self._heap, (time_ns, priority, next(self._seq), payload))

    def _ready_indices(self) -> list[int]:
        return [i for i, s in enumerate(self._slots) if s.state == "ready"]

    def _refused(self, live: LiveRequest, slot: ReplicaSlot, now: int, exc: ValueError) -> RequestRecord:
        """The engine refused a request (it can never fit the replica's KV cache): it fails as a record, and its
        session or client goes on."""
        del self._live[live.spec.id]
        slot.outstanding -= 1
        rec = record_error(live.spec, live.scheduled_ns, live.prompt, live.replica, now, str(exc), sent_ns=live.sent_ns)
        self._after_request(live, now)
        return rec

    # ---- provided by the parts (simulator.py, routing.py, clients.py) ----------------------------------------
    def _run_step(self, idx: int, now: int) -> None:
        raise NotImplementedError

    def _route_live(self, live: LiveRequest, now: int) -> None:
        raise NotImplementedError

    def _after_request(self, live: LiveRequest, now: int, output: int = 0, end: int | None = None) -> None:
        raise NotImplementedError
