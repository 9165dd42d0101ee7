"""The DuckDB store: connection handling that is safe with several processes.

DuckDB lets one process at a time open a database file for writing. tailscope therefore never holds the database
open: every read or write opens a connection, does one short transaction and closes it, retrying with jittered backoff
while another process holds the lock. Bench runs do not write to the database directly from the hot path; they append
batch files that are folded in (see :mod:`tailscope.store.writer`), so a busy database never stalls a run and a crash
never leaves a half-written database.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tailscope.errors import StoreError

DEFAULT_DB = Path(".tailscope") / "tailscope.duckdb"
#: 2: runs gained ``probe`` and the writer's identity and heartbeat; ``folded_batches`` records every folded batch.
#: 3: requests gained ``trace_id`` and ``span_id`` (``bench --trace-context``).
#: 4: requests gained ``first_answer_ns``, ``reasoning_tokens`` and ``cached_tokens``.
#: 5: requests gained ``connection_reused``, ``dns_ns``, ``connect_ns`` and ``tls_ns`` (connection phases).
#: 6: requests gained ``step`` and ``depends_on`` (an agent session's call-graph node and the calls it waited for).
#: 7: requests gained ``session_calls`` (the calls an agent session was drawn with, so a cut one is told apart).
#: 8: ``chunk_tokens`` NULL means one token per chunk (written so since this version); a store newer than the
#:    tailscope reading it is refused (:func:`check_not_newer`), so a later format is never misread.
SCHEMA_VERSION = 8

#: The columns of the requests table, with their DuckDB types (batch files use the same names).
REQUEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"),
    ("id", "BIGINT"),
    ("request_class", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("turn", "INTEGER"),
    ("scheduled_ns", "BIGINT"),
    ("sent_ns", "BIGINT"),
    ("first_token_ns", "BIGINT"),
    ("end_ns", "BIGINT"),
    ("stream_end_ns", "BIGINT"),
    ("first_event_ns", "BIGINT"),
    ("status", "VARCHAR"),
    ("error", "VARCHAR"),
    ("error_detail", "VARCHAR"),
    ("http_status", "INTEGER"),
    ("input_tokens", "INTEGER"),
    ("output_tokens", "INTEGER"),
    ("requested_output_tokens", "INTEGER"),
    ("tokens_source", "VARCHAR"),
    ("server_request_id", "VARCHAR"),
    ("chunk_times_ns", "BIGINT[]"),
    ("chunk_tokens", "INTEGER[]"),
    ("warmup", "BOOLEAN"),
    ("shared_prefix", "BOOLEAN"),
    ("worker", "INTEGER"),
    ("trace_id", "VARCHAR"),
    ("span_id", "VARCHAR"),
    ("first_answer_ns", "BIGINT"),
    ("reasoning_tokens", "INTEGER"),
    ("cached_tokens", "INTEGER"),
    ("connection_reused", "BOOLEAN"),
    ("dns_ns", "BIGINT"),
    ("connect_ns", "BIGINT"),
    ("tls_ns", "BIGINT"),
    ("step", "VARCHAR"),
    ("depends_on", "BIGINT[]"),
    ("session_calls", "INTEGER"),
)

SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"),
    ("t_ns", "BIGINT"),
    ("name", "VARCHAR"),
    ("labels", "VARCHAR"),
    ("value", "DOUBLE"),
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
    id VARCHAR PRIMARY KEY,
    kind VARCHAR NOT NULL,
    tool_version VARCHAR,
    started_at VARCHAR,
    finished_at VARCHAR,
    target_url VARCHAR,
    target_model VARCHAR,
    target_json VARCHAR,
    seed BIGINT,
    settings_json VARCHAR,
    profile VARCHAR,
    status VARCHAR,
    sweep_id VARCHAR,
    host_json VARCHAR,
    summary_json VARCHAR,
    extra_json VARCHAR,
    probe VARCHAR,
    writer_pid BIGINT,
    writer_host VARCHAR,
    writer_start VARCHAR,
    heartbeat_at VARCHAR
);
CREATE TABLE IF NOT EXISTS requests ({", ".join(f"{n} {t}" for n, t in REQUEST_COLUMNS)});
CREATE TABLE IF NOT EXISTS server_samples ({", ".join(f"{n} {t}" for n, t in SAMPLE_COLUMNS)});
CREATE TABLE IF NOT EXISTS tags (run_id VARCHAR, tag VARCHAR, created_at VARCHAR);
CREATE TABLE IF NOT EXISTS folded_batches (run_id VARCHAR, batch VARCHAR, rows BIGINT, folded_at VARCHAR);
"""

#: Columns added to ``runs`` since schema 1 (added in place to older stores).
_RUNS_ADDED = (
    ("probe", "VARCHAR"),
    ("writer_pid", "BIGINT"),
    ("writer_host", "VARCHAR"),
    ("writer_start", "VARCHAR"),
    ("heartbeat_at", "VARCHAR"),
)
#: Columns added to ``requests`` since schema 2, appended in place to older stores (batch folds insert by position).
#: They are the tail of ``REQUEST_COLUMNS`` from ``trace_id`` on (new columns are only ever appended there).
_REQUESTS_ADDED = REQUEST_COLUMNS[[name for name, _ in REQUEST_COLUMNS].index("trace_id") :]


_TABLES = ("meta", "runs", "requests", "server_samples", "tags", "folded_batches")


def _schema_state(con: Any) -> str:
    """``current`` (every table, at this schema version: nothing to create), ``empty`` (none of the tables: the DDL
    creates them whole) or ``old`` (a store of an older tailscope, or half created: its tables gain the new columns)."""
    names = ", ".join(f"'{t}'" for t in _TABLES)
    n = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "  # noqa: S608 - constants
        f"AND schema_name = 'main' AND table_name IN ({names})"
    ).fetchone()[0]
    if n == 0:
        return "empty"
    if n != len(_TABLES):
        return "old"
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return "current" if row is not None and row[0] == str(SCHEMA_VERSION) else "old"


def stored_version(con: Any) -> int | None:
    """The store's schema version, or ``None`` while it has none (a store still being created)."""
    has_meta = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'meta'"
    ).fetchone()[0]
    if not has_meta:  # checked first: a failed query would abort the caller's transaction
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return None if row is None else int(row[0])


def check_not_newer(version: int | None, path: Path) -> None:
    """Refuse a store written by a newer tailscope (its schema ``version`` above :data:`SCHEMA_VERSION`)."""
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"store {path} was written by a newer tailscope (store schema {version}, this tailscope reads up to "
            f"{SCHEMA_VERSION}): upgrade tailscope (pip install -U tailscope), or point --db / TAILSCOPE_DB elsewhere"
        )


def resolve_db_path(path: str | os.PathLike[str] | None) -> Path:
    """The store path: explicit ``path`` > ``$TAILSCOPE_DB`` > ``./.tailscope/tailscope.duckdb``."""
    if path:
        return Path(path)
    env = os.environ.get("TAILSCOPE_DB")
    if env:
        return Path(env)
    return DEFAULT_DB


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text or "conflicting" in text or "being used by another process" in text


class Database:
    """A DuckDB file opened per operation, with retry while another process holds it.

    Args:
        path: the database file; created (with its folder) on first write.
        lock_timeout_s: how long to keep retrying a locked database before raising :class:`StoreError`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, lock_timeout_s: float = 30.0) -> None:
        self.path = resolve_db_path(path)
        self.lock_timeout_s = lock_timeout_s
        self._schema_ready = False
        self._version_checked = False
        self._keep = False  # keep_open(): the next connection opened stays open until release()
        self._held: Any = None
        self._held_lock = threading.Lock()

    @property
    def exists(self) -> bool:
        return self.path.exists()

    @property
    def pending_root(self) -> Path:
        """This store's unfolded batch files: ``<folder>/pending/<store file name>/<run id>/``.

        Keyed by the store's file name, so two stores in one folder never fold each other's runs.
        """
        return self.path.parent / "pending" / self.path.name

    @property
    def quarantine_root(self) -> Path:
        """Batches that could not be folded, kept with the reason: ``<folder>/quarantine/<store file name>/``."""
        return self.path.parent / "quarantine" / self.path.name

    def keep_open(self) -> None:
        """From now until :meth:`release`, one DuckDB instance serves every read and write of this database.

        The first connection opened after this call stays open, and each later operation (from any thread) runs on a
        cursor of it — still its own short transaction, committed as before, so a ``kill -9`` keeps exactly what it
        kept. Why: opening a DuckDB instance costs ~15–20 ms of CPU and closing it (a checkpoint) ~5–10 ms, and a
        bench's last steps — the final fold, reading the records back, finishing the run — would each pay both.
        Another process waits while it is held (as it waits for any transaction): hold it only for such short spans.
        """
        self._keep = True

    def release(self) -> None:
        """End :meth:`keep_open`: close the held instance (its checkpoint runs now); idempotent."""
        with self._held_lock:
            self._keep = False
            con, self._held = self._held, None
        if con is not None:
            con.close()

    @contextmanager
    def held(self) -> Iterator[None]:
        """:meth:`keep_open` for the span of a ``with`` block, released at its end — or nothing when the database
        is already held by a caller (whose :meth:`release` then ends it)."""
        if self._keep or self._held is not None:
            yield
            return
        self.keep_open()
        try:
            yield
        finally:
            self.release()

    def _open(self, read_only: bool) -> Any:
        if self._keep or self._held is not None:
            with self._held_lock:
                if self._held is None and self._keep:
                    self._held = self._connect(read_only=False)  # read-write: its cursors serve reads too
                if self._held is not None:
                    return self._held.cursor()
        return self._connect(read_only)

    def _connect(self, read_only: bool) -> Any:
        import duckdb

        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.005
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.Error as exc:
                if not _is_lock_error(exc) or time.monotonic() > deadline:
                    raise StoreError(
                        f"cannot open the store {self.path}: {str(exc).splitlines()[0]}"
                        + (
                            " — another process kept it locked; retry when it finishes"
                            if _is_lock_error(exc)
                            else " — check the path (--db / TAILSCOPE_DB) and its permissions"
                        )
                    ) from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)

    def prepare_folder(self) -> None:
        """Create the store's folder when missing and check that it is writable (no DuckDB open).

        Raises:
            StoreError: naming the folder and what to do.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store folder {self.path.parent}: {exc.strerror}") from None
        if not os.access(self.path.parent, os.W_OK):
            raise StoreError(f"the store folder {self.path.parent} is not writable; choose another with --db")

    def ensure_schema(self) -> None:
        """Create the folder, the file and the tables when missing."""
        if self._schema_ready:
            return
        with self.write(ensure_schema=True):
            pass

    def _create_schema(self, con: Any) -> None:
        state = _schema_state(con)
        if state == "current":  # a store of this version: its DDL would change nothing (and costs ~10 ms of CPU)
            return
        check_not_newer(stored_version(con), self.path)
        con.execute(_SCHEMA)
        if state == "old":  # a new store's tables have every column already (the ALTERs cost ≈ 6 ms of CPU)
            for name, kind in _RUNS_ADDED:
                con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {name} {kind}")
            for name, kind in _REQUESTS_ADDED:
                con.execute(f"ALTER TABLE requests ADD COLUMN IF NOT EXISTS {name} {kind}")
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
            [str(SCHEMA_VERSION)],
        )

    @contextmanager
    def write(self, *, ensure_schema: bool = False) -> Iterator[Any]:
        """A read-write connection inside one transaction; committed on success, rolled back on error.

        Args:
            ensure_schema: also create the folder, the file and the tables when missing (:meth:`ensure_schema`), in
                this same transaction: one DuckDB open for both.
        """
        schema = ensure_schema and not self._schema_ready
        if schema:
            self.prepare_folder()
        con = self._open(read_only=False)
        try:
            with self._duckdb_errors():
                con.execute("BEGIN TRANSACTION")
                try:
                    if schema:
                        self._create_schema(con)
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
        finally:
            con.close()
        if schema:
            self._schema_ready = True

    @contextmanager
    def _duckdb_errors(self) -> Iterator[None]:
        """A DuckDB error becomes a StoreError naming the store (its message's first line); others pass through."""
        try:
            yield
        except Exception as exc:
            import duckdb

            if isinstance(exc, duckdb.Error):
                raise StoreError(f"store {self.path}: {str(exc).splitlines()[0]}") from None
            raise

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A read-only connection (the store must exist)."""
        if not self.path.exists():
            raise StoreError(
                f"no store at {self.path} yet: run `tailscope bench` first, or point --db / TAILSCOPE_DB at one"
            )
        con = self._open(read_only=True)
        if not self._version_checked:
            try:
                version = stored_version(con)
                check_not_newer(version, self.path)
            except StoreError:
                con.close()
                raise
            if version is not None and version < SCHEMA_VERSION:
                # a store written by an older tailscope: add the new columns once, then read
                con.close()
                self.ensure_schema()
                con = self._open(read_only=True)
            self._version_checked = True
        try:
            with self._duckdb_errors():
                yield con
        finally:
            con.close()
