"""Pending batches: where a run's records wait on disk, who is writing them, and how they fold into DuckDB.

Layout, keyed by the store's file name so that two stores in one folder never fold each other's runs::

    <folder>/pending/<store file>/<run id>/writer.json           the writing process; its mtime is the heartbeat
    <folder>/pending/<store file>/<run id>/<seq>-<tok>.ndjson    a sealed batch of records (fsynced, renamed)
    <folder>/pending/<store file>/<run id>/<seq>-<tok>.samples.ndjson   a sealed batch of server samples
    <folder>/pending/<store file>/<run id>/<name>.open           the journal being appended (see writer.py)
    <folder>/quarantine/<store file>/<run id>/<batch> + <batch>.reason   what could not be folded, and why

Folding is exactly once: each folded batch is recorded in ``folded_batches`` in the same transaction as its rows,
and a batch already recorded is skipped (a crash between the commit and the file's deletion folds nothing twice).
Rows are checked in the transaction; a batch DuckDB cannot read, or with rows that cannot be records, is never
retried forever: its good lines are folded and the rest kept in quarantine with the reason, so one bad file never
blocks a store.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailscope.clock import utc_now_iso
from tailscope.store import faults
from tailscope.store.bounds import (
    ERROR_VALUES,
    STATUS_VALUES,
    TOKENS_SOURCE_VALUES,
    BoundNotes,
    bound_row,
    request_row_problem,
    sample_row_problem,
)
from tailscope.store.db import REQUEST_COLUMNS, SAMPLE_COLUMNS, Database

WRITER_FILE = "writer.json"
#: A writer on another host (a store on a shared disk) whose heartbeat is older than this is taken as dead.
STALE_S = 120.0


def pending_dir(db: Database, run_id: str) -> Path:
    """Where a run's unfolded batch files live."""
    return db.pending_root / run_id


# -- who writes ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WriterId:
    """The process writing a run: pid, host name, and a start token that tells a reused pid apart."""

    pid: int
    host: str
    start: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "start": self.start}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks since boot) of a process, from /proc (None when unreadable)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def this_writer() -> WriterId:
    """The current process as a writer."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return WriterId(pid, socket.gethostname(), f"{_boot_id()}:{stat[1]}" if stat else "")


def writer_alive(w: WriterId, heartbeat_age_s: float | None) -> bool:
    """Whether the writer still runs: its pid (and start token) on this host, its heartbeat on another."""
    me = this_writer()
    if w.host != me.host:
        return heartbeat_age_s is not None and heartbeat_age_s < STALE_S
    if w.pid == me.pid:
        return not w.start or not me.start or w.start == me.start
    try:
        os.kill(w.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False
    stat = _proc_stat(w.pid)
    if stat is None:
        return True  # no /proc (macOS): the pid exists
    if stat[0] in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return not w.start or w.start.rpartition(":")[2] == stat[1]


def write_writer_file(folder: Path, w: WriterId, run_id: str, store: Path) -> None:
    """Say who writes this folder (written to a temporary name and renamed: never half a file)."""
    tmp = folder / (WRITER_FILE + ".tmp")
    tmp.write_text(json.dumps({**w.to_json(), "run_id": run_id, "store": str(store)}))
    os.replace(tmp, folder / WRITER_FILE)


def read_writer_file(folder: Path) -> tuple[WriterId | None, float | None]:
    """(The writer of a pending folder, seconds since its last heartbeat); Nones when unknown.

    Reads ``writer.json`` (this version) or ``writer.pid`` (tailscope ≤ 0.1).
    """
    for name in (WRITER_FILE, "writer.pid"):
        path = folder / name
        try:
            text = path.read_text()
            age = time.time() - path.stat().st_mtime
        except OSError:
            continue
        try:
            if name == WRITER_FILE:
                d = json.loads(text)
                return WriterId(int(d["pid"]), str(d["host"]), str(d.get("start") or "")), age
            return WriterId(int(text.strip()), socket.gethostname()), age
        except (ValueError, KeyError, TypeError):
            return None, age
    return None, None


# -- journals of dead writers --------------------------------------------------------------------------------------
def salvage_journals(folder: Path) -> int:
    """Turn a dead writer's open journals into sealed batches (complete lines only); return how many.

    A journal is appended without fsync, so after ``kill -9`` it holds every line the writer handed to the kernel;
    only a line cut by a full disk or a power loss can be partial, and that one is dropped.
    """
    n = 0
    for path in sorted(folder.glob("*.open")):
        try:
            data = path.read_bytes()
            keep = data.rfind(b"\n") + 1
            if keep == 0:
                path.unlink()
                continue
            if keep < len(data):
                os.truncate(path, keep)
            os.replace(path, path.with_suffix(""))
            n += 1
        except FileNotFoundError:
            continue  # another process salvaged it first
    return n


# -- folding -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FoldResult:
    """What one fold did: batch files folded, rows added, and batches set aside (with the reason)."""

    folded: int = 0
    rows: int = 0
    quarantined: tuple[str, ...] = ()


class _BadBatch(Exception):
    """A batch DuckDB cannot read, or with rows that cannot be records."""


def _data_error(exc: BaseException) -> bool:
    import duckdb

    return isinstance(
        exc,
        duckdb.InvalidInputException
        | duckdb.ConversionException
        | duckdb.OutOfRangeException
        | duckdb.TypeMismatchException,
    )


def _is_samples(path: Path) -> bool:
    return path.name.endswith(".samples.ndjson")


def _sealed(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".ndjson"))


_VALID_REQUEST = (
    "id IS NOT NULL AND scheduled_ns IS NOT NULL AND status IN ({}) AND (error IS NULL OR error IN ({})) "
    "AND tokens_source IN ({})"
).format(*(", ".join(f"'{v}'" for v in values) for values in (STATUS_VALUES, ERROR_VALUES, TOKENS_SOURCE_VALUES)))
_VALID_SAMPLE = "t_ns IS NOT NULL AND name IS NOT NULL AND value IS NOT NULL"


def _columns_sql(columns: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"'{n}': '{t}'" for n, t in columns) + "}"


def _fold_one(con: Any, run_id: str, path: Path) -> int:
    """Insert one batch file's rows for ``run_id`` (the run id in the file is ignored); return the rows added.

    One pass: DuckDB reads the file straight into the table, and a row that cannot be a record raises as it is
    inserted (``error()`` in the first column), which spoils the transaction and sends the batch to the one-by-one
    fold and the quarantine. A temporary copy of the batch, counted and then inserted, cost a fifth of a fold's CPU.
    """
    samples = _is_samples(path)
    columns = SAMPLE_COLUMNS if samples else REQUEST_COLUMNS
    quoted = str(path).replace("'", "''")
    valid = _VALID_SAMPLE if samples else _VALID_REQUEST
    what = "samples" if samples else "records"
    first, *rest = (c for c, _ in columns if c != "run_id")
    checked = f"CASE WHEN coalesce(({valid}), false) THEN b.{first} ELSE error('rows cannot be {what}') END"
    names = ", ".join([checked, *(f"b.{c}" for c in rest)])
    # the path is our own batch file (quotes escaped); columns are constants
    source = f"read_json('{quoted}', format='newline_delimited', columns={_columns_sql(columns)}) b"
    try:
        if samples:
            row = con.execute(f"INSERT INTO server_samples SELECT ?, {names} FROM {source}", [run_id]).fetchone()  # noqa: S608
        else:
            row = con.execute(
                f"INSERT INTO requests SELECT ?, {names} FROM {source} "  # noqa: S608 - constant columns
                "ANTI JOIN (SELECT id FROM requests WHERE run_id = ?) e ON b.id = e.id",
                [run_id, run_id],
            ).fetchone()
    except Exception as exc:
        if _data_error(exc):
            raise _BadBatch(str(exc).splitlines()[0]) from None
        raise
    return int(row[0])


def _fold_files(db: Database, run_id: str, files: list[Path], heartbeat: bool) -> tuple[int, int]:
    """Fold ``files`` in one transaction (skipping batches already folded); (files folded, rows)."""
    folded = rows = 0
    with db.write() as con:
        names = [f.name for f in files]
        done = {
            r[0]
            for r in con.execute(
                "SELECT batch FROM folded_batches WHERE run_id = ? AND batch IN (SELECT unnest(?))", [run_id, names]
            ).fetchall()
        }
        now = utc_now_iso()
        for f in files:
            if f.name in done:
                continue
            n = _fold_one(con, run_id, f)
            con.execute("INSERT INTO folded_batches VALUES (?, ?, ?, ?)", [run_id, f.name, n, now])
            folded += 1
            rows += n
        if heartbeat:
            con.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", [now, run_id])
        faults.hit("fold")
    faults.hit("folded")
    return folded, rows


def fold_pending(
    db: Database,
    run_id: str,
    *,
    folder: Path | None = None,
    lock_timeout_s: float | None = None,
    heartbeat: bool = False,
) -> FoldResult:
    """Fold a run's sealed batch files into the database and delete them.

    Args:
        folder: the run's pending folder (default :func:`pending_dir`).
        lock_timeout_s: how long to wait for a database another process holds (default: the database's).
        heartbeat: also stamp the run's ``heartbeat_at`` (the writer does, a repair does not).

    Raises:
        StoreError: when the database stays locked or cannot be written (the files stay on disk, nothing is lost).
    """
    folder = folder if folder is not None else pending_dir(db, run_id)
    if not folder.is_dir():
        return FoldResult()
    files = _sealed(folder)
    if not files:
        return FoldResult()
    saved = db.lock_timeout_s
    if lock_timeout_s is not None:
        db.lock_timeout_s = lock_timeout_s
    quarantined: list[str] = []
    done = list(files)
    try:
        try:
            folded, rows = _fold_files(db, run_id, files, heartbeat)
        except _BadBatch:
            # one file spoilt the transaction: fold them one by one, setting aside what cannot be folded
            folded = rows = 0
            for f in files:
                try:
                    k, n = _fold_files(db, run_id, [f], heartbeat)
                except _BadBatch as exc:
                    quarantined.append(f.name)
                    salvaged = _salvage_bad_batch(db, run_id, f, str(exc))
                    if salvaged is None:
                        continue
                    done.append(salvaged)
                    try:
                        k, n = _fold_files(db, run_id, [salvaged], heartbeat)
                    except _BadBatch as again:
                        quarantine_file(db, run_id, salvaged, str(again))
                        quarantined.append(salvaged.name)
                        continue
                folded += k
                rows += n
    finally:
        db.lock_timeout_s = saved
    for f in done:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
    return FoldResult(folded, rows, tuple(quarantined))


def _salvage_bad_batch(db: Database, run_id: str, path: Path, reason: str) -> Path | None:
    """Split a batch DuckDB refused: good lines to a new batch (returned), the file itself to quarantine."""
    samples = _is_samples(path)
    columns = SAMPLE_COLUMNS if samples else REQUEST_COLUMNS
    check = sample_row_problem if samples else request_row_problem
    good: list[str] = []
    bad: list[str] = []
    notes = BoundNotes()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    for i, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            bad.append(f"line {i}: not JSON ({exc})")
            continue
        if not isinstance(row, dict):
            bad.append(f"line {i}: not a JSON object")
            continue
        row = bound_row(row, columns, notes)
        problem = check(row)
        if problem:
            bad.append(f"line {i}: {problem}")
        else:
            good.append(json.dumps(row, separators=(",", ":")))
    detail = [f"{len(good)} good line(s) folded, {len(bad)} kept here", *bad[:200]]
    out = None
    if good and ".salvaged." not in path.name:
        stem = path.name.removesuffix(".samples.ndjson").removesuffix(".ndjson")
        out = path.with_name(stem + (".salvaged.samples.ndjson" if samples else ".salvaged.ndjson"))
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("\n".join(good) + "\n")
        os.replace(tmp, out)
    quarantine_file(db, run_id, path, reason + "\n" + "\n".join(detail))
    return out


# -- quarantine ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Quarantined:
    """A batch (or its bad lines) that could not be folded, kept aside with the reason."""

    run_id: str
    path: Path
    reason: str


def quarantine_file(db: Database, run_id: str, path: Path, reason: str) -> Path:
    """Move ``path`` aside into the store's quarantine, with ``reason`` beside it; return its new path."""
    dest = db.quarantine_root / run_id
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / path.name
    (dest / (path.name + ".reason")).write_text(reason.rstrip() + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, target)
    return target


def quarantine_lines(db: Database, run_id: str, name: str, lines: list[str], reason: str) -> Path:
    """Keep rows the writer could not store (as JSON lines) in quarantine, with the reason."""
    dest = db.quarantine_root / run_id
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    with open(target, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    (dest / (name + ".reason")).write_text(reason.rstrip() + "\n")
    return target


def list_quarantine(db: Database, run_id: str | None = None) -> list[Quarantined]:
    """What this store has set aside (every run, or one)."""
    root = db.quarantine_root
    if not root.is_dir():
        return []
    out: list[Quarantined] = []
    for run_dir in sorted(root.iterdir()) if run_id is None else [root / run_id]:
        if not run_dir.is_dir():
            continue
        for reason in sorted(run_dir.glob("*.reason")):
            with contextlib.suppress(OSError):
                first = reason.read_text(errors="replace").splitlines()[0] if reason.stat().st_size else ""
                out.append(Quarantined(run_dir.name, reason.with_suffix(""), first))
    return out


def remove_run_files(db: Database, run_id: str) -> None:
    """Delete a run's pending folder and its quarantine (when the run is deleted)."""
    for folder in (pending_dir(db, run_id), db.quarantine_root / run_id):
        if folder.is_dir():
            for p in folder.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()
