"""The work behind ``tailscope runs`` (imported lazily)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tailscope.cli.common import write_export
from tailscope.errors import ConfigError, StoreError
from tailscope.metrics.document import build_export, clean_json, run_to_json
from tailscope.report.console import dialect_renderable, print_summary, stdout_console
from tailscope.store.pending import Quarantined
from tailscope.store.repair import RepairReport
from tailscope.store.runs import RunStore, StoredRun
from tailscope.units import format_ms


def _headline(s: dict[str, Any] | None, key: str, pct: str = "p99") -> str:
    if not s or key not in s:
        return "—"
    return format_ms((s.get(key) or {}).get(pct))


def _report_repair(report: RepairReport, con: Console, *, limit: int = 5) -> None:
    for r in report.repaired[:limit]:
        con.print(f"repaired {r.describe()}", highlight=False)
    if len(report.repaired) > limit:
        con.print(f"… and {len(report.repaired) - limit} more run(s) repaired")
    for q in report.quarantined[:limit]:
        con.print(f"quarantined: run {q.run_id}: {q.path} — {q.reason}", highlight=False, soft_wrap=True)
    if len(report.quarantined) > limit:
        con.print(f"… and {len(report.quarantined) - limit} more quarantined batch(es) (`tailscope runs repair`)")


def runs_json(runs: list[StoredRun], quarantined: tuple[Quarantined, ...] = ()) -> list[dict[str, Any]]:
    """The runs as ``runs list --json`` writes them: run, request counts (from the records), summary, tags."""
    return [
        {
            "run": run_to_json(r.run),
            "requests": r.requests.to_dict() if r.requests else None,
            "summary": r.summary,
            "tags": list(r.tags),
            "finished_at": r.finished_at,
            "heartbeat_at": r.heartbeat_at,
            "crash": r.extra.get("crash"),
            "quarantined": [{"path": str(q.path), "reason": q.reason} for q in quarantined if q.run_id == r.run.id],
        }
        for r in runs
    ]


def list_runs(*, db: Path | None, limit: int, kind: str | None, tag: str | None, json_out: str | None) -> None:
    store = RunStore(db)
    err = Console(stderr=True)
    try:
        report = store.repair()
    except StoreError as exc:  # a store another process keeps locked: list what is there
        err.print(f"warning: could not repair crashed runs now: {exc}", highlight=False)
        report = RepairReport()
    _report_repair(report, err)
    runs = store.list_runs(limit=limit, kind=kind, tag=tag)
    if json_out is not None:
        text = json.dumps(clean_json(runs_json(runs, report.quarantined)), indent=1)
        if json_out == "-":
            print(text)
        else:
            out = Path(json_out)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"--json {json_out}: cannot write it ({exc.strerror})") from None
            err.print(f"wrote {json_out}")
        return
    t = Table(show_edge=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for c in ("id", "kind", "status", "started", "target", "ok/fail", "TTFT p99", "TPOT p99", "out tok/s", "tags"):
        t.add_column(c, no_wrap=c in ("id", "started"), max_width=28 if c == "target" else None)
    for r in runs:
        s = r.summary or {}
        req = r.requests.to_dict() if r.requests else (s.get("requests") or {})
        target = r.run.target
        t.add_row(
            r.run.id,
            r.run.kind.value,
            r.run.status.value,
            r.run.started_at[5:16].replace("T", " "),
            ("built-in " if target.builtin else "") + (target.model or target.url),
            f"{req.get('completed', '—')}/{req.get('failed', '—')}",
            _headline(s, "ttft_ms"),
            _headline(s, "tpot_ms"),
            f"{s['output_tokens_per_s']:,.0f}" if "output_tokens_per_s" in s else "—",
            ",".join(r.tags),
        )
    con = stdout_console()
    if not runs:
        con.print(f"no runs in {store.db.path} yet — try `tailscope bench --requests 50`")
        return
    con.print(t)


def _summary_for(store: RunStore, stored: StoredRun, dialect: str) -> dict[str, Any]:
    if dialect == "tailscope":
        if stored.summary is None:
            from tailscope.metrics.summary import summarize

            return summarize(store.load_records(stored.run.id)).to_dict()
        return stored.summary
    from tailscope.metrics.dialects import DIALECTS, summarize_dialect

    if dialect.strip().lower() not in DIALECTS:
        raise ConfigError(f"--dialect {dialect!r}: use one of {', '.join(DIALECTS)}")
    result: dict[str, Any] = summarize_dialect(store.load_records(stored.run.id), dialect)
    return result


def show_run(*, db: Path | None, ref: str, dialect: str, as_json: bool) -> None:
    store = RunStore(db)
    stored = store.get_run(ref)
    summary = _summary_for(store, stored, dialect)
    if as_json:
        print(json.dumps({"run": run_to_json(stored.run), "summary": summary, "dialect": dialect}, indent=1))
        return
    if dialect != "tailscope":
        run = stored.run
        con = stdout_console()
        con.print(f"[bold]run {run.id}[/]  {run.kind.value}  {run.status.value}\ntarget {run.target.url}  model "
                  f"{run.target.model}")  # fmt: skip
        con.print(dialect_renderable(summary))
        return
    print_summary(run_to_json(stored.run), summary, stdout_console())


def export_run(*, db: Path | None, ref: str, fmt: str, out: Path) -> None:
    store = RunStore(db)
    stored = store.get_run(ref)
    if fmt == "json":
        records = store.load_records(stored.run.id)
        write_export(out, build_export(stored.run, stored.summary or {}, records))
    elif fmt in ("parquet", "csv"):
        out.parent.mkdir(parents=True, exist_ok=True)
        path = str(out).replace("'", "''")
        run_id = stored.run.id.replace("'", "''")
        options = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
        with store.db.read() as con:
            if fmt == "csv":
                # CSV has no lists: write chunk arrays as JSON text
                select = (
                    "SELECT * REPLACE (to_json(chunk_times_ns) AS chunk_times_ns, "
                    "to_json(chunk_tokens) AS chunk_tokens) FROM requests"
                )
            else:
                select = "SELECT * FROM requests"
            con.execute(f"COPY ({select} WHERE run_id = '{run_id}' ORDER BY id) TO '{path}' {options}")
    else:
        raise ConfigError(f"--format {fmt!r}: use parquet, csv or json")
    Console(stderr=True).print(f"wrote {out}")


def repair_runs(*, db: Path | None) -> None:
    report = RunStore(db).repair()
    con = stdout_console()
    _report_repair(report, con, limit=1_000)
    con.print(
        f"repaired {len(report.repaired)} run(s)"
        + (": " + ", ".join(report.run_ids) if report.repaired else "")
        + (f"; {len(report.quarantined)} batch(es) in quarantine" if report.quarantined else ""),
        highlight=False,
    )
