"""Console rendering of the store's runs: the run list and what a repair did (consumes prepared models only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tailscope.records import Run
from tailscope.units import format_ms


def _headline(s: dict[str, Any] | None, key: str, pct: str = "p99") -> str:
    if not s or key not in s:
        return "—"
    return format_ms((s.get(key) or {}).get(pct))


def _workload(settings: dict[str, Any], profile: str | None) -> str:
    """The workload's shape in a few words: the profile, dataset or replay, else the flags' load."""
    if profile:
        return profile
    mode = settings.get("mode")
    if mode == "closed":
        return f"c={settings.get('concurrency')}"
    if mode == "open":
        return f"{settings.get('rate') or 'curve'}/s"
    return str(mode or "—")


def runs_table(runs: Sequence[Any]) -> Table:
    """One row per run (a ``StoredRun``): id, kind, status, start, target (host:port and model), workload, counts,
    headline latencies, throughput and tags. Numbers are never cut (the target column wraps instead)."""
    t = Table(show_edge=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for c in ("id", "kind", "status", "started", "target", "workload", "ok/fail", "TTFT p99", "TPOT p99", "out tok/s",
              "tags"):  # fmt: skip
        numeric = c in ("ok/fail", "TTFT p99", "TPOT p99", "out tok/s")
        t.add_column(c, no_wrap=c in ("id", "started") or numeric, justify="right" if numeric else "left",
                     overflow="fold", max_width=30 if c == "target" else None)  # fmt: skip
    for r in runs:
        s = r.summary or {}
        req = r.requests.to_dict() if r.requests else (s.get("requests") or {})
        target = r.run.target
        where = "built-in" if target.builtin else target.url.split("://", 1)[-1]
        t.add_row(
            r.run.id,
            r.run.kind.value,
            r.run.status.value,
            r.run.started_at[5:16].replace("T", " "),
            f"{where} {target.model}".strip(),
            _workload(r.run.settings if isinstance(r.run.settings, dict) else {}, r.run.profile),
            f"{req.get('completed', '—')}/{req.get('failed', '—')}",
            _headline(s, "ttft_ms"),
            _headline(s, "tpot_ms"),
            f"{s['output_tokens_per_s']:,.0f}" if s.get("output_tokens_per_s") is not None else "—",
            ",".join(r.tags),
        )
    return t


def print_repair(report: Any, con: Console, *, limit: int = 5) -> None:
    """What a repair did: runs repaired (crashed writers) and batches set aside in quarantine."""
    for r in report.repaired[:limit]:
        con.print(f"repaired {r.describe()}", highlight=False)
    if len(report.repaired) > limit:
        con.print(f"… and {len(report.repaired) - limit} more run(s) repaired")
    for q in report.quarantined[:limit]:
        con.print(f"quarantined: run {q.run_id}: {q.path} — {q.reason}", highlight=False, soft_wrap=True)
    if len(report.quarantined) > limit:
        con.print(f"… and {len(report.quarantined) - limit} more quarantined batch(es) (`tailscope runs repair`)")


def print_listing_repair(listing: Any, con: Console) -> None:
    """``tailscope runs list``: what the repair before the listing did, or why it could not run."""
    if listing.repair_error:
        con.print(f"warning: could not repair crashed runs now: {listing.repair_error}", highlight=False)
    print_repair(listing.repair, con)


def print_repaired(report: Any, con: Console) -> None:
    """``tailscope runs repair``: every run repaired and batch quarantined, then one line counting them."""
    print_repair(report, con, limit=1_000)
    ids = ": " + ", ".join(report.run_ids) if report.repaired else ""
    quarantined = f"; {len(report.quarantined)} batch(es) in quarantine" if report.quarantined else ""
    con.print(f"repaired {len(report.repaired)} run(s){ids}{quarantined}", highlight=False)


def print_run_view(
    con: Console, run: Run, summary: dict[str, Any], dialect: str, tool_summary: dict[str, Any] | None = None
) -> None:
    """``tailscope runs show``: the summary (as ``dialect`` defines its metrics); for an imported run, its figures
    as the importing tool defined them (``tool_summary``) beside ours; the trace-context note of a traced run."""
    from tailscope.metrics.document import run_to_json
    from tailscope.report.console import dialect_renderable, print_summary

    if dialect != "tailscope":
        con.print(f"[bold]run {run.id}[/]  {run.kind.value}  {run.status.value}\ntarget {run.target.url}  model "
                  f"{run.target.model}")  # fmt: skip
        con.print(dialect_renderable(summary))
        return
    print_summary(run_to_json(run), summary, con)
    imported = run.settings.get("import")
    if isinstance(imported, dict) and tool_summary is not None:
        from tailscope.report.peers_console import import_renderable

        con.print(import_renderable(imported, tool_summary, summary))
    traced = summary.get("trace_context")
    if isinstance(traced, dict):
        con.print(
            f"trace context: {traced.get('traced', 0)} requests sent a traceparent (ratio {traced.get('ratio')}); "
            f"their trace_id/span_id are in the records — join them: tailscope trace join --run {run.id} --set SET"
        )
