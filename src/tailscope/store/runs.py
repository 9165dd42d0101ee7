"""Runs in the store: create, finish, list, look up, tag, load records, repair."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from tailscope.clock import utc_now_iso
from tailscope.errors import NotFoundError
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, ServerSample, Target
from tailscope.store.codec import row_to_record, row_to_sample
from tailscope.store.db import Database
from tailscope.store.writer import fold_pending, pending_dir


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as stored, with its summary (JSON dict) when one was written."""

    run: Run
    finished_at: str | None
    summary: dict[str, Any] | None
    tags: tuple[str, ...]
    extra: dict[str, Any]


def _row_to_stored(row: dict[str, Any], tags: tuple[str, ...]) -> StoredRun:
    target_d = json.loads(row["target_json"]) if row["target_json"] else {"url": row["target_url"], "model": ""}
    run = Run(
        id=row["id"],
        kind=RunKind(row["kind"]),
        tool_version=row["tool_version"] or "",
        started_at=row["started_at"] or "",
        target=Target(**target_d),
        seed=int(row["seed"] or 0),
        settings=json.loads(row["settings_json"]) if row["settings_json"] else {},
        profile=row["profile"],
        status=RunStatus(row["status"]),
        sweep_id=row["sweep_id"],
        host=json.loads(row["host_json"]) if row["host_json"] else {},
    )
    return StoredRun(
        run=run,
        finished_at=row["finished_at"],
        summary=json.loads(row["summary_json"]) if row["summary_json"] else None,
        tags=tags,
        extra=json.loads(row["extra_json"]) if row["extra_json"] else {},
    )


def _fetch_dicts(con: Any, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


class RunStore:
    """High-level access to runs in one DuckDB store.

    Args:
        db: a :class:`Database` or a path (``None`` = ``$TAILSCOPE_DB`` or ``./.tailscope/tailscope.duckdb``).
    """

    def __init__(self, db: Database | str | os.PathLike[str] | None = None) -> None:
        self.db = db if isinstance(db, Database) else Database(db)

    # -- writing ---------------------------------------------------------------------------------------------
    def create_run(self, run: Run) -> None:
        """Insert a new run row (status ``running``)."""
        self.db.ensure_schema()
        with self.db.write() as con:
            con.execute(
                "INSERT INTO runs (id, kind, tool_version, started_at, target_url, target_model, target_json, seed, "
                "settings_json, profile, status, sweep_id, host_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    run.id,
                    run.kind.value,
                    run.tool_version,
                    run.started_at,
                    run.target.url,
                    run.target.model,
                    json.dumps(asdict(run.target)),
                    run.seed,
                    json.dumps(run.settings, default=str),
                    run.profile,
                    run.status.value,
                    run.sweep_id,
                    json.dumps(run.host, default=str),
                ],
            )

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        summary: dict[str, Any] | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Set a run's final status and summary."""
        with self.db.write() as con:
            con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary_json = ?, extra_json = ? WHERE id = ?",
                [
                    status.value,
                    utc_now_iso(),
                    json.dumps(summary) if summary is not None else None,
                    json.dumps(extra) if extra else None,
                    run_id,
                ],
            )

    def write_records(self, run_id: str, records: list[RequestRecord]) -> None:
        """Write records in one go (for simulations and imports); uses the same batch path as live runs."""
        from tailscope.store.writer import RecordWriter

        writer = RecordWriter(self.db, run_id, flush_interval_s=3600)
        for r in records:
            writer.add(r)
        writer.close()

    def tag(self, run_id: str, tag: str) -> str:
        """Attach ``tag`` to a run (a tag names a baseline, e.g. ``main``); returns the full run id."""
        full = self.resolve_id(run_id)
        with self.db.write() as con:
            con.execute("DELETE FROM tags WHERE run_id = ? AND tag = ?", [full, tag])
            con.execute("INSERT INTO tags VALUES (?, ?, ?)", [full, tag, utc_now_iso()])
        return full

    # -- reading ---------------------------------------------------------------------------------------------
    def list_runs(self, *, limit: int = 50, kind: str | None = None, tag: str | None = None) -> list[StoredRun]:
        """Most recent runs first."""
        if not self.db.exists:
            return []
        where: list[str] = []
        params: list[Any] = []
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if tag:
            where.append("id IN (SELECT run_id FROM tags WHERE tag = ?)")
            params.append(tag)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")  # noqa: S608 (fixed clauses)
        sql += " ORDER BY started_at DESC, id DESC LIMIT ?"
        params.append(limit)
        with self.db.read() as con:
            rows = _fetch_dicts(con, sql, params)
            tags = self._tags(con, [r["id"] for r in rows])
        return [_row_to_stored(r, tags.get(r["id"], ())) for r in rows]

    def _tags(self, con: Any, ids: list[str]) -> dict[str, tuple[str, ...]]:
        if not ids:
            return {}
        out: dict[str, list[str]] = {}
        for run_id, tag in con.execute(
            "SELECT run_id, tag FROM tags WHERE run_id IN (SELECT unnest(?)) ORDER BY created_at", [ids]
        ).fetchall():
            out.setdefault(run_id, []).append(tag)
        return {k: tuple(v) for k, v in out.items()}

    def resolve_id(self, ref: str) -> str:
        """Full run id for ``ref``: an id, a unique id prefix, ``latest``, or ``latest:TAG``.

        Raises:
            NotFoundError: naming the reference and how to list runs.
        """
        with self.db.read() as con:
            if ref == "latest" or ref.startswith("latest:"):
                tag = ref.partition(":")[2]
                if tag:
                    row = con.execute(
                        "SELECT r.id FROM runs r JOIN tags t ON t.run_id = r.id WHERE t.tag = ? "
                        "ORDER BY r.started_at DESC LIMIT 1",
                        [tag],
                    ).fetchone()
                else:
                    row = con.execute("SELECT id FROM runs ORDER BY started_at DESC, id DESC LIMIT 1").fetchone()
                if row is None:
                    what = f"tagged {tag!r}" if tag else "at all"
                    raise NotFoundError(f"no run {what} in {self.db.path}; list runs with `tailscope runs list`")
                return str(row[0])
            rows = con.execute("SELECT id FROM runs WHERE id LIKE ? || '%' LIMIT 3", [ref]).fetchall()
        if not rows:
            raise NotFoundError(f"no run {ref!r} in {self.db.path}; list runs with `tailscope runs list`")
        exact = [r[0] for r in rows if r[0] == ref]
        if exact:
            return str(exact[0])
        if len(rows) > 1:
            raise NotFoundError(f"run id prefix {ref!r} is ambiguous ({', '.join(r[0] for r in rows)}, …)")
        return str(rows[0][0])

    def get_run(self, ref: str) -> StoredRun:
        """The stored run for an id, prefix, ``latest`` or ``latest:TAG``."""
        run_id = self.resolve_id(ref)
        with self.db.read() as con:
            rows = _fetch_dicts(con, "SELECT * FROM runs WHERE id = ?", [run_id])
            tags = self._tags(con, [run_id])
        return _row_to_stored(rows[0], tags.get(run_id, ()))

    def load_records(self, run_id: str) -> list[RequestRecord]:
        """Every request record of a run, by id."""
        with self.db.read() as con:
            rows = _fetch_dicts(con, "SELECT * FROM requests WHERE run_id = ? ORDER BY id", [run_id])
        return [row_to_record(r) for r in rows]

    def load_samples(self, run_id: str) -> list[ServerSample]:
        """Every scraped server sample of a run, in time order."""
        with self.db.read() as con:
            rows = _fetch_dicts(
                con, "SELECT * FROM server_samples WHERE run_id = ? ORDER BY t_ns, name, labels", [run_id]
            )
        return [row_to_sample(r) for r in rows]

    # -- repair ----------------------------------------------------------------------------------------------
    def repair(self) -> list[str]:
        """Fold the batches of runs whose writer died (crash, ``kill -9``) and mark those runs incomplete.

        Returns the ids of the runs repaired. Runs whose writer process is still alive are left alone.
        """
        root = self.db.path.parent / "pending"
        repaired: list[str] = []
        if not root.is_dir():
            return repaired
        for folder in sorted(root.iterdir()):
            if not folder.is_dir():
                continue
            pid_file = folder / "writer.pid"
            if pid_file.exists() and _pid_alive(pid_file.read_text().strip()):
                continue
            run_id = folder.name
            fold_pending(self.db, run_id)
            with self.db.write() as con:
                con.execute(
                    "UPDATE runs SET status = ? WHERE id = ? AND status = ?",
                    [RunStatus.INCOMPLETE.value, run_id, RunStatus.RUNNING.value],
                )
            for p in folder.iterdir():
                p.unlink()
            folder.rmdir()
            repaired.append(run_id)
        return repaired

    def pending_exists(self, run_id: str) -> bool:
        return pending_dir(self.db, run_id).is_dir()


def _pid_alive(text: str) -> bool:
    try:
        pid = int(text)
    except ValueError:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
