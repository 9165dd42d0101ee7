"""``bench --replay FILE``: a recorded trace's requests sent again at their own times (× ``--time-scale``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tailscope.errors import ConfigError
from tailscope.runner.base_config import Resolved, at_own_times, last_send_s
from tailscope.runner.options import BenchOptions
from tailscope.workload.simple import check_bounds
from tailscope.workload.spec import RequestSpec


def sessions_follow_turn0(specs: Iterable[RequestSpec]) -> list[RequestSpec]:
    """Reorder a stream so every session's later turns follow its turn 0 directly (what the load generator reads).

    Trace rows are sorted by time, so the turns of concurrent sessions interleave; the runner sends a later turn
    after the previous response anyway (think time), so only the stream order changes, never a send time.
    """
    groups: list[list[RequestSpec]] = []
    open_sessions: dict[str, list[RequestSpec]] = {}
    for s in specs:
        if s.session_id is not None and (s.turn or 0) > 0 and s.session_id in open_sessions:
            open_sessions[s.session_id].append(s)
            continue
        group = [s]
        groups.append(group)
        if s.session_id is not None:
            open_sessions[s.session_id] = group
    return [s for g in groups for s in g]


def resolve_replay(opts: BenchOptions) -> Resolved:
    from tailscope.io.replay import read_replay
    from tailscope.workload.replay import replay_requests

    assert opts.replay is not None
    for flag, name in (("--rate", "rate"), ("--concurrency", "concurrency")):
        if opts.given(name):
            raise ConfigError(
                f"{flag} does not apply to --replay: the trace fixes the send times; use --time-scale to speed up "
                "(0.5 = twice as fast) or slow down"
            )
    check_bounds(("--time-scale", opts.time_scale, 1e6))  # inf made NaN send times (found by fuzz_cli)
    if not opts.time_scale > 0:
        raise ConfigError(f"--time-scale must be > 0 (got {opts.time_scale:g}); 0.5 replays twice as fast")
    rows = read_replay(Path(opts.replay), fmt=opts.replay_format)
    specs = sessions_follow_turn0(
        replay_requests(
            rows,
            seed=opts.value("seed"),
            time_scale=opts.time_scale,
            prefix_tokens=opts.replay_prefix_tokens,
            warmup=opts.value("warmup"),
            max_requests=opts.requests,
            duration_s=opts.duration,
        )
    )
    if not specs:
        raise ConfigError(f"--replay {opts.replay}: no request falls inside --duration/--requests")
    last_s = last_send_s(
        specs,
        spans=f"--replay {opts.replay}: the trace spans",
        fix="check its timestamps' unit, speed it up with --time-scale or cut it with --duration",
    )
    firsts = [s for s in specs if s.at_ns is not None]
    mean_rate = (len(firsts) - 1) / last_s if last_s > 0 and len(firsts) > 1 else 1.0
    if opts.max_rate is not None and mean_rate > opts.max_rate:
        raise ConfigError(
            f"--replay {opts.replay}: the trace's mean rate {mean_rate:.3g}/s exceeds --max-rate {opts.max_rate:g}; "
            "slow it down with --time-scale or raise the cap"
        )
    return at_own_times(
        opts,
        specs,
        mode="replay",
        name=f"replay:{Path(opts.replay).name}",
        label=f"--replay {opts.replay}",
        requests=opts.requests,
        duration_s=opts.duration,
        warmup=opts.value("warmup"),
        input_tokens="replay",
        output_tokens="replay",
        replay=str(opts.replay),
        replay_format=opts.replay_format,
        time_scale=opts.time_scale,
        **({"replay_prefix_tokens": opts.replay_prefix_tokens} if opts.replay_prefix_tokens else {}),
    )
