"""Crash detection and repair: what a dead writer left is folded, its run marked incomplete, bad batches reported.

A run is ``running`` while its writer lives. The writer is known twice: the run row (``writer_pid``,
``writer_host``, ``writer_start`` — the process start token that tells a reused pid apart — and ``heartbeat_at``,
stamped at every fold) and the run's pending folder (``writer.json``, touched every second). A writer on this host is
alive while its pid runs with the same start token; on another host (a store on a shared disk) while its heartbeat
is younger than :data:`~tailscope.store.pending.STALE_S`.

:func:`repair_store` (run by ``runs list`` and ``runs repair``) then, for this store only:

1. folds the pending folders of dead writers (their open journals first: every complete line), then deletes them —
   folders of runs that are not in this store are never touched;
2. marks every ``running`` run whose writer is dead ``incomplete``, recording the writer and its last heartbeat;
3. lists what is quarantined.

It never raises for a bad batch (that is quarantined); it raises :class:`~tailscope.errors.StoreError` only when
the database itself cannot be opened or stays locked.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tailscope.clock import utc_now_iso
from tailscope.records import RunStatus
from tailscope.store.db import Database
from tailscope.store.pending import (
    WRITER_FILE,
    Quarantined,
    WriterId,
    fold_pending,
    list_quarantine,
    read_writer_file,
    salvage_journals,
    writer_alive,
)


@dataclass(frozen=True, slots=True)
class RepairedRun:
    """A run whose writer died: what was folded and whether it was marked incomplete."""

    run_id: str
    writer_pid: int | None
    last_heartbeat: str | None
    rows_folded: int
    marked_incomplete: bool
    quarantined: tuple[str, ...] = ()

    def describe(self) -> str:
        who = f"writer pid {self.writer_pid}" if self.writer_pid is not None else "its writer"
        what = [f"{who} died (last heartbeat {self.last_heartbeat or 'unknown'})"]
        if self.rows_folded:
            what.append(f"{self.rows_folded:,} unsaved row(s) folded")
        if self.marked_incomplete:
            what.append("marked incomplete")
        if self.quarantined:
            what.append(f"{len(self.quarantined)} batch(es) quarantined")
        return f"{self.run_id}: " + ", ".join(what)


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What :func:`repair_store` did, and what the store keeps in quarantine."""

    repaired: tuple[RepairedRun, ...] = ()
    quarantined: tuple[Quarantined, ...] = ()

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.repaired]


def _age_s(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return time.time() - datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _row_writer(row: dict[str, Any]) -> WriterId | None:
    if row.get("writer_pid") is None:
        return None
    return WriterId(int(row["writer_pid"]), row.get("writer_host") or "", row.get("writer_start") or "")


def _folders(db: Database, run_ids: set[str]) -> list[Path]:
    """This store's pending folders, and tailscope ≤ 0.1's shared ones that belong to this store's runs."""
    out: list[Path] = []
    if db.pending_root.is_dir():
        out += sorted(p for p in db.pending_root.iterdir() if p.is_dir())
    shared = db.path.parent / "pending"
    if shared.is_dir():
        for p in sorted(shared.iterdir()):
            if p.is_dir() and p.name in run_ids and (p / "writer.pid").exists():
                out.append(p)
    return out


def _clear_folder(folder: Path) -> None:
    for name in (WRITER_FILE, "writer.pid"):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    for p in folder.glob("*.tmp"):  # a half-written file of tailscope ≤ 0.1 (never renamed: never a batch)
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def repair_store(db: Database) -> RepairReport:
    """Fold what dead writers left, mark their runs incomplete, list the quarantine (see the module docstring).

    Raises:
        StoreError: when the database cannot be opened or stays locked past its timeout.
    """
    if not db.exists:
        return RepairReport()
    with db.read() as con:  # (a store of an older tailscope gains the writer columns here first)
        cur = con.execute(
            "SELECT id, status, writer_pid, writer_host, writer_start, heartbeat_at FROM runs "
            "WHERE status = ? OR id IN (SELECT unnest(?))",
            [RunStatus.RUNNING.value, [p.name for p in _candidate_names(db)]],
        )
        names = [d[0] for d in cur.description]
        rows = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    repaired: dict[str, RepairedRun] = {}
    for folder in _folders(db, set(rows)):
        run_id = folder.name
        row = rows.get(run_id)
        if row is None:
            continue  # not a run of this store: never ours to fold
        w, age = read_writer_file(folder)
        if w is None:
            w, age = _row_writer(row), _age_s(row.get("heartbeat_at"))
        if w is not None and writer_alive(w, age):
            continue
        salvage_journals(folder)
        fold = fold_pending(db, run_id, folder=folder)
        _clear_folder(folder)
        repaired[run_id] = RepairedRun(
            run_id, w.pid if w else None, row.get("heartbeat_at"), fold.rows, False, fold.quarantined
        )
    dead: list[str] = []
    for run_id, row in rows.items():
        if row["status"] != RunStatus.RUNNING.value:
            continue
        w = _row_writer(row)
        if w is None and run_id not in repaired:
            continue  # a run of tailscope ≤ 0.1 with no pending folder: nothing says whether it still runs
        if w is not None and writer_alive(w, _age_s(row.get("heartbeat_at"))):
            continue
        dead.append(run_id)
    if dead:
        _mark_incomplete(db, dead)
        for run_id in dead:
            row = rows[run_id]
            prev = repaired.get(run_id)
            repaired[run_id] = RepairedRun(
                run_id,
                row.get("writer_pid"),
                row.get("heartbeat_at"),
                prev.rows_folded if prev else 0,
                True,
                prev.quarantined if prev else (),
            )
    return RepairReport(tuple(repaired.values()), tuple(list_quarantine(db)))


def _candidate_names(db: Database) -> list[Path]:
    folders: list[Path] = []
    for root in (db.pending_root, db.path.parent / "pending"):
        if root.is_dir():
            folders += [p for p in root.iterdir() if p.is_dir()]
    return folders


def _mark_incomplete(db: Database, run_ids: list[str]) -> None:
    now = utc_now_iso()
    with db.write() as con:
        for run_id in run_ids:
            found = con.execute(
                "SELECT extra_json, heartbeat_at, writer_pid, writer_host FROM runs WHERE id = ? AND status = ?",
                [run_id, RunStatus.RUNNING.value],
            ).fetchone()
            if found is None:
                continue  # finished meanwhile
            extra = json.loads(found[0]) if found[0] else {}
            extra["crash"] = {
                "writer_pid": found[2],
                "writer_host": found[3],
                "last_heartbeat": found[1],
                "detected_at": now,
            }
            con.execute(
                "UPDATE runs SET status = ?, finished_at = coalesce(finished_at, heartbeat_at, ?), extra_json = ? "
                "WHERE id = ? AND status = ?",
                [RunStatus.INCOMPLETE.value, now, json.dumps(extra), run_id, RunStatus.RUNNING.value],
            )
