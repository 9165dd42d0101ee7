"""Console rendering of a simulation's own figures (``tailscope sim``): virtual vs wall time, engine steps, KV
transfers and swaps, the autoscaler's decisions and timeline, the prediction interval. Computes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from tailscope.sim.result import SimResult as SimFigures


def sim_lines(res: SimFigures) -> list[str]:
    """The simulator's headline (virtual time, speed-up, steps, preemptions, prefix hits, GPU-hours), its KV
    traffic when there was any, then the autoscaler's decisions."""
    hit = res.prefix_hit_rate
    lines = [
        f"sim: {res.virtual_s:,.1f} s virtual in {res.wall_s:.2f} s ({res.speedup:,.0f}× real time), "
        f"{res.steps:,} engine steps, {res.preemptions:,} preemptions, prefix-cache hit rate "
        f"{'—' if hit is None else f'{hit:.1%}'}, {res.gpu_seconds / 3600:,.2f} GPU-hours"
    ]
    if res.clients_stagger_s is not None:
        lines.append(stagger_line(res.clients, res.clients_stagger_s))
    if res.kv_transfer_s or res.kv_swapped_tokens or res.recompute_tokens:
        lines.append(
            f"KV: {res.kv_transfer_s:,.1f} s of prefill→decode transfers, {res.kv_swapped_tokens:,} tokens swapped "
            f"to/from host ({res.kv_swap_s:,.2f} s), {res.recompute_tokens:,} tokens recomputed after preemption"
        )
    lines.extend(  # a rebuild is a replacement (change 0): its reason says which replica
        f"autoscaler: t={t:,.0f}s " + (f"{change:+d} replica(s) ({why})" if change else why)
        for t, change, why in res.scale_events
    )
    return lines


def stagger_line(clients: int, stagger_s: float) -> str:
    """How a closed loop's clients started, and how to simulate the start ``tailscope bench`` makes."""
    bench = "`tailscope bench --concurrency`"
    if stagger_s == 0:
        return f"closed loop: {clients:,} clients started together (--stagger 0), as {bench} does"
    return (
        f"closed loop: {clients:,} clients started over {stagger_s:,.2f} s (--stagger; default: one request's "
        f"lifetime, so fixed lengths do not start in lock-step); {bench} starts them together: --stagger 0 "
        "simulates that"
    )


def interval_line(interval: Mapping[str, Mapping[str, tuple[float, float]]], source: Mapping[str, Any] | None) -> str:
    """The prediction interval of every metric and percentile, named by where it comes from."""
    rows = ", ".join(f"{m} {p} {lo:,.1f}–{hi:,.1f} ms" for m, pcts in interval.items() for p, (lo, hi) in pcts.items())
    src = source or {}
    if src.get("kind") == "residuals":
        return f"90% prediction interval (step-model residuals on {src.get('label')}): {rows}"
    return f"twin prediction interval (±1σ of the fitted costs): {rows}"


def timeline_table(timeline: list[dict[str, Any]], max_rows: int = 24) -> Table:
    """Every k-th 10-second window of the timeline (at most ``max_rows`` rows) as a rich table."""
    step = max(1, -(-len(timeline) // max_rows))
    t = Table(title="Timeline (10 s windows)", title_justify="left", show_edge=False, header_style="bold")
    for col in ("t (s)", "replicas", "cold", "waiting", "running", "KV use", "TTFT p99 ms", "done"):
        t.add_column(col, justify="right")
    for row in timeline[::step]:
        p99 = row.get("ttft_p99_ms")
        t.add_row(
            f"{row['t_s']:,.0f}",
            str(row["replicas_ready"]),
            str(row["replicas_pending"]),
            str(row["waiting"]),
            str(row["running"]),
            f"{row['kv_usage']:.0%}",
            "—" if p99 is None else f"{p99:,.0f}",
            str(row["completed"]),
        )
    return t


def print_sim(
    con: Console,
    res: SimFigures,
    *,
    timeline: bool,
    interval: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
    interval_source: Mapping[str, Any] | None = None,
) -> None:
    """The lines after a simulation's summary (plain text on stdout), the timeline table when ``timeline`` and the
    run has one, and the prediction interval when there is one."""
    for line in sim_lines(res):
        print(line)
    if timeline and res.timeline:
        con.print(timeline_table(res.timeline))
    if interval is not None:
        print(interval_line(interval, interval_source))


def print_sim_result(out: Any, err: Console, *, timeline: bool) -> None:
    """``tailscope sim``: the target line on ``err``, then the run's summary and :func:`print_sim`'s lines on stdout."""
    from tailscope.metrics.document import run_to_json
    from tailscope.report.console import print_summary, stdout_console

    err.print(f"[cyan]target: {out.run.target.description}[/]")
    print_summary(run_to_json(out.run), out.summary_dict(), stdout_console())
    print_sim(stdout_console(), out.sim, timeline=timeline, interval=out.prediction_interval,
              interval_source=out.prediction_interval_source)  # fmt: skip
