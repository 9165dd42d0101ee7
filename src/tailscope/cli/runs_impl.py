"""The work behind ``tailscope runs`` (imported lazily)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tailscope.cli.common import write_export
from tailscope.errors import ConfigError
from tailscope.metrics.document import build_export, run_to_json
from tailscope.report.console import dialect_renderable, print_summary, stdout_console
from tailscope.store.runs import RunStore, StoredRun
from tailscope.units import format_ms


def _headline(s: dict[str, Any] | None, key: str, pct: str = "p99") -> str:
    if not s or key not in s:
        return "—"
    return format_ms((s.get(key) or {}).get(pct))


def list_runs(*, db: Path | None, limit: int, kind: str | None, tag: str | None, as_json: bool) -> None:
    store = RunStore(db)
    store.repair()
    runs = store.list_runs(limit=limit, kind=kind, tag=tag)
    if as_json:
        print(json.dumps([{"run": run_to_json(r.run), "summary": r.summary, "tags": list(r.tags)} for r in runs]))
        return
    t = Table(show_edge=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for c in ("id", "kind", "status", "started", "target", "ok/fail", "TTFT p99", "TPOT p99", "out tok/s", "tags"):
        t.add_column(c, no_wrap=c in ("id", "started"), max_width=28 if c == "target" else None)
    for r in runs:
        s = r.summary or {}
        req = s.get("requests") or {}
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
