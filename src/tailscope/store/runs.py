"""Runs in the store: create, finish, list (with request counts), look up, tag, delete, load records, repair."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailscope.clock import utc_now_iso
from tailscope.errors import NotFoundError, StoreError
from tailscope.records import RequestCounts, RequestRecord, Run, RunKind, RunStatus, ServerSample, Target
from tailscope.store.bounds import BoundNotes, bound_text, check_run
from tailscope.store.codec import row_to_record, row_to_sample
from tailscope.store.db import Database
from tailscope.store.pending import (
    Quarantined,
    WriterId,
    list_quarantine,
    pending_dir,
    remove_run_files,
    this_writer,
    writer_alive,
)

if TYPE_CHECKING:
    from tailscope.metrics.chunk_times import ChunkTimes
    from tailscope.store.repair import RepairReport

#: The tag every probe run carries (``runs list --tag probe``, ``latest:probe``).
PROBE_TAG = "probe"


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as stored, with its summary (JSON dict) when one was written."""

    run: Run
    finished_at: str | None
    summary: dict[str, Any] | None
    tags: tuple[str, ...]
    extra: dict[str, Any]
    requests: RequestCounts | None = None  # counted from the stored records (``list_runs``)
    heartbeat_at: str | None = None  # the writer's last sign of life (UTC ISO)


def _row_to_stored(row: dict[str, Any], tags: tuple[str, ...], counts: RequestCounts | None = None) -> StoredRun:
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
        probe=row.get("probe"),
    )
    return StoredRun(
        run=run,
        finished_at=row["finished_at"],
        summary=json.loads(row["summary_json"]) if row["summary_json"] else None,
        tags=tags,
        extra=json.loads(row["extra_json"]) if row["extra_json"] else {},
        requests=counts,
        heartbeat_at=row.get("heartbeat_at"),
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
        """Insert a new run row (status ``running``), naming this process as its writer.

        Raises:
            StoreError: when the run's id or seed cannot be stored (see :func:`~tailscope.store.bounds.check_run`).
        """
        check_run(run)
        notes = BoundNotes()

        def text(value: str | None, name: str) -> str | None:
            return None if value is None else bound_text(value, name, notes)

        w = this_writer()
        now = utc_now_iso()
        with self.db.write(ensure_schema=True) as con:  # the schema check and the row: one DuckDB open
            con.execute(
                "INSERT INTO runs (id, kind, tool_version, started_at, target_url, target_model, target_json, seed, "
                "settings_json, profile, status, sweep_id, host_json, probe, writer_pid, writer_host, writer_start, "
                "heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    run.id,
                    run.kind.value,
                    text(run.tool_version, "tool_version"),
                    text(run.started_at, "started_at"),
                    text(run.target.url, "target_url"),
                    text(run.target.model, "target_model"),
                    json.dumps(asdict(run.target), default=str),
                    run.seed,
                    json.dumps(run.settings, default=str),
                    text(run.profile, "profile"),
                    run.status.value,
                    text(run.sweep_id, "sweep_id"),
                    json.dumps(run.host, default=str),
                    text(run.probe, "probe"),
                    w.pid,
                    w.host,
                    w.start,
                    now,
                ],
            )
            if run.probe:
                con.execute("INSERT INTO tags VALUES (?, ?, ?)", [run.id, PROBE_TAG, now])

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
                    json.dumps(summary, default=str) if summary is not None else None,
                    json.dumps(extra, default=str) if extra else None,
                    run_id,
                ],
            )

    def annotate_summary(self, run_id: str, key: str, value: Any) -> None:
        """Add ``key: value`` to a finished run's stored summary (a drill's windows and fault timeline)."""
        with self.db.write() as con:
            row = con.execute("SELECT summary_json FROM runs WHERE id = ?", [run_id]).fetchone()
            summary = json.loads(row[0]) if row and row[0] else {}
            summary[key] = value
            con.execute("UPDATE runs SET summary_json = ? WHERE id = ?", [json.dumps(summary, default=str), run_id])

    def write_records(self, run_id: str, records: list[RequestRecord]) -> None:
        """Write records in one go (for simulations and imports); uses the same batch path as live runs."""
        from tailscope.store.writer import RecordWriter

        writer = RecordWriter(self.db, run_id, flush_interval_s=3600)
        for r in records:
            writer.add(r)
        writer.close()

    def write_records_bulk(
        self,
        run_id: str,
        records: list[RequestRecord],
        samples: list[ServerSample] | None = None,
        chunk_times: ChunkTimes | None = None,
    ) -> None:
        """Write machine-built records (a simulation's) and samples in one transaction, column by column.

        DuckDB scans the columns as NumPy arrays (the chunk arrays as one object array of tuples, read as lists):
        10,000 simulated requests with 256 chunks each take ≈ 0.2 s instead of ≈ 3 s through the live writer's
        per-record journal. Every value must fit its column as it is (a simulator's records do); when one does not
        — a text too long or not ASCII, an integer out of range — the records go through :meth:`write_records`
        instead, which bounds each value and notes the change. Records whose id is already stored are skipped, as
        a fold skips them. ``chunk_times``: ``records``' chunk times already flattened, in their order
        (:func:`~tailscope.metrics.chunk_times.flatten`): with pyarrow installed DuckDB then reads them as one Arrow
        list column (offsets and values, no Python object per time: ≈ 0.08 s less for 2.5 million times).
        """
        if not records and not samples:
            return
        if records and not _texts_fit(records):
            self.write_records(run_id, records)
            records = []
        if samples and not all(math.isfinite(s.value) for s in samples):
            # a NumPy scan reads NaN as NULL; the record writer keeps NaN and ±inf as Prometheus gives them
            self._write_samples(run_id, samples)
            samples = None
        try:
            with self.db.write() as con:
                # a transaction bigger than the checkpoint threshold is checkpointed at its commit instead of being
                # written to the WAL first and checkpointed again at close or at the next commit: each chunk time
                # written once (≈ 0.1 s of CPU for 10,000 simulated requests of 256 tokens)
                con.execute(f"SET checkpoint_threshold = '{_BULK_CHECKPOINT}'")
                # the inserts on one thread: ≤ 20,000 rows are about one row group, which DuckDB's other threads
                # barely share, and handing them work cost ≈ 0.03–0.05 s of CPU and as much wall-clock (10,000
                # records of 256 chunk times on a 2-core machine); the commit's checkpoint has the instance's own
                # thread count again, and so has a held instance afterwards
                threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
                con.execute("SET threads = 1")
                if records:
                    _insert_records(con, run_id, records, chunk_times)
                if samples:
                    _insert_samples(con, run_id, samples)
                con.execute(f"SET threads = {int(threads)}")
        except StoreError:
            if not records:
                raise
            self.write_records(run_id, records)  # a value out of range: the bounded path
            if samples:
                self._write_samples(run_id, samples)

    def _write_samples(self, run_id: str, samples: list[ServerSample]) -> None:
        from tailscope.store.writer import RecordWriter

        writer = RecordWriter(self.db, run_id, flush_interval_s=3600)
        writer.add_samples(samples)
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
        """Most recent runs first, each with its request counts from the stored records."""
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
            ids = [r["id"] for r in rows]
            tags = self._tags(con, ids)
            counts = _request_counts(con, ids)
        return [_row_to_stored(r, tags.get(r["id"], ()), counts.get(r["id"], _NO_REQUESTS)) for r in rows]

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

        ``latest`` is the newest run that is not a probe (calibration, find-max or twin-check runs); ``latest:probe``
        finds those.

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
                    row = con.execute(
                        "SELECT id FROM runs WHERE probe IS NULL ORDER BY started_at DESC, id DESC LIMIT 1"
                    ).fetchone()
                if row is None:
                    what = f"tagged {tag!r}" if tag else "(other than probe runs)"
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
            rows = _fetch_dicts(con, f"{_REQUESTS} WHERE run_id = ? ORDER BY id", [run_id])
        return [row_to_record(r) for r in rows]

    def load_samples(self, run_id: str) -> list[ServerSample]:
        """Every scraped server sample of a run, in time order."""
        with self.db.read() as con:
            rows = _fetch_dicts(
                con, "SELECT * FROM server_samples WHERE run_id = ? ORDER BY t_ns, name, labels", [run_id]
            )
        return [row_to_sample(r) for r in rows]

    # -- deleting and repair ---------------------------------------------------------------------------------
    def delete_runs(self, refs: list[str]) -> list[str]:
        """Delete runs (ids, unique prefixes, ``latest``, ``latest:TAG``) with their records, samples, tags,
        pending batches and quarantine; return the ids deleted.

        Raises:
            NotFoundError: for a reference that matches no run (nothing is deleted then).
            StoreError: for a run still being written by a live process (stop it first).
        """
        ids: list[str] = []
        for ref in refs:
            full = self.resolve_id(ref)
            if full not in ids:
                ids.append(full)
        if not ids:
            return []
        with self.db.read() as con:
            rows = _fetch_dicts(
                con,
                "SELECT id, status, writer_pid, writer_host, writer_start FROM runs WHERE id IN (SELECT unnest(?))",
                [ids],
            )
        for r in rows:
            if r["status"] == RunStatus.RUNNING.value and r["writer_pid"] is not None:
                w = WriterId(int(r["writer_pid"]), r["writer_host"] or "", r["writer_start"] or "")
                if writer_alive(w, 0.0):
                    raise StoreError(
                        f"run {r['id']} is still being written by process {w.pid} on {w.host}; stop it first"
                    )
        with self.db.write() as con:
            for table, column in (
                ("requests", "run_id"),
                ("server_samples", "run_id"),
                ("tags", "run_id"),
                ("folded_batches", "run_id"),
                ("runs", "id"),
            ):
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?))", [ids])  # noqa: S608
        for run_id in ids:
            remove_run_files(self.db, run_id)
        return ids

    def export_requests(self, run_id: str, path: Path, *, fmt: str) -> None:
        """Write a run's request rows (the store's columns, times in ns) as ``parquet`` or ``csv`` (chunk arrays as
        JSON text: CSV has no lists), with DuckDB's ``COPY``.

        Raises:
            StoreError: naming the path when it cannot be written.
        """
        options = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
        select = _REQUESTS
        if fmt == "csv":
            select = (
                "SELECT * REPLACE (to_json(chunk_times_ns) AS chunk_times_ns, to_json(chunk_tokens) AS chunk_tokens, "  # noqa: S608 - constants
                f"to_json(depends_on) AS depends_on) FROM ({_REQUESTS})"
            )
        quoted, rid = str(path).replace("'", "''"), run_id.replace("'", "''")  # COPY takes no parameters
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self.db.read() as con:
                con.execute(f"COPY ({select} WHERE run_id = '{rid}' ORDER BY id) TO '{quoted}' {options}")
        except OSError as exc:
            raise StoreError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None

    def repair(self) -> RepairReport:
        """Fold what dead writers left, mark their runs incomplete, and list what is quarantined.

        See :func:`tailscope.store.repair.repair_store`.
        """
        from tailscope.store.repair import repair_store

        return repair_store(self.db)

    def pending_exists(self, run_id: str) -> bool:
        return pending_dir(self.db, run_id).is_dir()

    def quarantined(self, run_id: str | None = None) -> list[Quarantined]:
        """Batches of this store set aside because they could not be folded (every run, or one)."""
        return list_quarantine(self.db, run_id)


_NO_REQUESTS = RequestCounts(total=0, completed=0, failed=0, incomplete=0, warmup=0)


def _request_counts(con: Any, ids: list[str]) -> dict[str, RequestCounts]:
    """Request counts per run, from the stored records (warmup requests apart, as the summary counts them)."""
    if not ids:
        return {}
    rows = con.execute(
        "SELECT run_id, count(*) FILTER (NOT coalesce(warmup, false)), "
        "count(*) FILTER (NOT coalesce(warmup, false) AND status = 'ok'), "
        "count(*) FILTER (NOT coalesce(warmup, false) AND status = 'error'), "
        "count(*) FILTER (NOT coalesce(warmup, false) AND status = 'incomplete'), "
        "count(*) FILTER (coalesce(warmup, false)) "
        "FROM requests WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id",
        [ids],
    ).fetchall()
    return {r[0]: RequestCounts(*(int(v) for v in r[1:])) for r in rows}


#: the checkpoint threshold of a bulk insert's DuckDB instance (see :meth:`RunStore.write_records_bulk`)
_BULK_CHECKPOINT = "1MB"

#: the text columns of a request row and the record attribute each comes from
_TEXT_ATTRS = ("request_class", "session_id", "error_detail", "server_request_id", "trace_id", "span_id", "step")


def _texts_fit(records: list[RequestRecord]) -> bool:
    from tailscope.store.bounds import MAX_TEXT

    for name in _TEXT_ATTRS:
        for v in set(map(attrgetter(name), records)):
            if v is not None and (type(v) is not str or not v.isascii() or len(v) > MAX_TEXT):
                return False
    return True


def _object_array(values: list[Any]) -> Any:
    import numpy as np

    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _typed_column(values: list[Any]) -> Any:
    """``values`` as the array DuckDB scans fastest: int64 when every value is a Python int that fits, bool when
    every value is a bool, else objects; None when every value is None (the column is then NULL in SQL)."""
    import numpy as np

    if values.count(None) == len(values):  # one pass in C, no Python call per value: most of a simulation's columns
        return None
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:  # beyond int64: the object path, where the cast raises and the bounded path takes over
            pass
    if kinds == {bool}:
        return np.asarray(values, dtype=np.bool_)
    return _object_array(values)


#: ``chunk_tokens`` as stored: NULL where every chunk carried one token (the columnar insert writes no list of ones:
#: ≈ 0.035 s of CPU less for the 2.5 million chunks of 10,000 simulated requests), else the list. No writer wrote
#: NULL before (the record journal, the earlier columnar insert and every schema version write a list, empty when
#: there is no chunk), so a store of any version reads back the same records through this expression.
ONE_PER_CHUNK = "coalesce(chunk_tokens, list_resize(CAST([] AS INTEGER[]), len(chunk_times_ns), 1))"
#: the request rows as readers take them (``chunk_tokens`` whole)
_REQUESTS = f"SELECT * REPLACE ({ONE_PER_CHUNK} AS chunk_tokens) FROM requests"  # noqa: S608 - constants


def _all_ones(toks: tuple[int, ...]) -> bool:
    """Whether every chunk carries one token (as every simulated chunk does)."""
    return bool(toks) and toks.count(1) == len(toks)


def _arrow_times(chunk_times: ChunkTimes | None, n: int) -> Any:
    """``chunk_times`` as an Arrow table of one list column, ``chunk_times_ns`` (None without pyarrow, or when they
    are not ``n`` records' times)."""
    if chunk_times is None or len(chunk_times.lengths) != n:
        return None
    try:
        import pyarrow as pa
    except ImportError:  # an optional dependency (the `arrow` extra): the object-array path
        return None
    import numpy as np

    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(chunk_times.lengths, out=offsets[1:])
    flat = np.ascontiguousarray(chunk_times.flat, dtype=np.int64)

    def int64s(a: Any) -> Any:
        # the array's memory as it is (pa.array(ndarray) would import numpy.ma to test for masks: ≈ 15 ms)
        return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])

    times = pa.LargeListArray.from_arrays(int64s(offsets), int64s(flat))
    return pa.table({"chunk_times_ns": times})


def _insert_records(con: Any, run_id: str, records: list[RequestRecord], chunk_times: ChunkTimes | None) -> None:

    from tailscope.store.db import REQUEST_COLUMNS

    enum_value = {"status": True, "error": True, "tokens_source": True}
    _bulk: dict[str, Any] = {}  # DuckDB finds it by its name (a replacement scan)
    _times = _arrow_times(chunk_times, len(records))  # likewise; read beside _bulk row by row (a POSITIONAL JOIN)
    columns: list[str] = []
    for name, sql_type in REQUEST_COLUMNS:
        if name == "run_id":
            continue
        if name in enum_value:
            # each distinct member's value looked up once (``member.value`` goes through Enum's descriptor)
            raw = list(map(attrgetter(name), records))
            value_of = {e: None if e is None else e.value for e in set(raw)}
            values: list[Any] = list(map(value_of.__getitem__, raw))
        elif name == "chunk_times_ns":
            if _times is not None:
                columns.append(f"CAST(t.chunk_times_ns AS {sql_type})")
                continue
            # tuples of Python ints: DuckDB reads an object array of them as a LIST column
            values = list(map(attrgetter(name), records))
        elif name == "chunk_tokens":
            # one token per chunk (every simulated chunk): stored as NULL, read back as ones (ONE_PER_CHUNK); each
            # distinct tuple is tested once (a simulation's records share one tuple per length)
            toks = list(map(attrgetter(name), records))
            distinct = {id(t): t for t in toks}  # ``toks`` keeps every object alive meanwhile
            stored = {k: None if _all_ones(t) else t for k, t in distinct.items()}
            values = [stored[id(t)] for t in toks]
        else:
            values = list(map(attrgetter(name), records))
        column = _typed_column(values)
        if column is None:  # every value None (a simulation's HTTP and trace fields): no column to scan
            columns.append(f"CAST(NULL AS {sql_type})")
            continue
        _bulk[name] = column
        columns.append(f"CAST(b.{name} AS {sql_type})")
    select = ", ".join(columns)
    source = "_bulk b" if _times is None else "_bulk b POSITIONAL JOIN _times t"
    con.execute(
        f"INSERT INTO requests SELECT ?, {select} FROM {source} "  # noqa: S608 - constant columns
        "ANTI JOIN (SELECT id FROM requests WHERE run_id = ?) e ON CAST(b.id AS BIGINT) = e.id",
        [run_id, run_id],
    )


def _insert_samples(con: Any, run_id: str, samples: list[ServerSample]) -> None:
    import numpy as np

    from tailscope.store.db import SAMPLE_COLUMNS

    _samples = {  # found by DuckDB's replacement scan (by its name)
        "t_ns": np.asarray([s.t_ns for s in samples], dtype=np.int64),
        "name": _object_array([s.name for s in samples]),
        "labels": _object_array([s.labels for s in samples]),
        "value": np.asarray([s.value for s in samples], dtype=np.float64),
    }
    select = ", ".join(f"CAST(b.{n} AS {t})" for n, t in SAMPLE_COLUMNS if n != "run_id")
    con.execute(f"INSERT INTO server_samples SELECT ?, {select} FROM _samples b", [run_id])  # noqa: S608
