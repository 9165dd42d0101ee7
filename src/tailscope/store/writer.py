"""Incremental, crash-safe persistence of a running run.

The run hands records to a :class:`RecordWriter` (thread-safe, non-blocking). A background thread, once per flush
interval, writes the new records to a JSON-lines batch file (written to a temporary name, fsynced, renamed) under
``<store dir>/pending/<run id>/`` and then folds every pending batch into DuckDB in one short transaction, deleting a
batch file only after its rows are committed. Folding skips rows already present, so a crash between commit and
delete never duplicates rows. If another process holds the database, batches wait on disk and fold on the next tick:
the run is never blocked, and a ``kill -9`` loses at most the records completed in the last flush interval.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from tailscope.errors import StoreError
from tailscope.records import RequestRecord, ServerSample
from tailscope.store.codec import encode_record_line, sample_to_row
from tailscope.store.db import REQUEST_COLUMNS, SAMPLE_COLUMNS, Database


def pending_dir(db: Database, run_id: str) -> Path:
    """Where a run's unfolded batch files live."""
    return db.path.parent / "pending" / run_id


def _columns_sql(columns: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"'{n}': '{t}'" for n, t in columns) + "}"


def fold_pending(db: Database, run_id: str, *, lock_timeout_s: float | None = None) -> int:
    """Fold a run's batch files into the database; return how many files were folded.

    Raises:
        StoreError: when the database stays locked past ``lock_timeout_s`` (files stay on disk, nothing is lost).
    """
    folder = pending_dir(db, run_id)
    if not folder.is_dir():
        return 0
    files = sorted(p for p in folder.iterdir() if p.suffix == ".ndjson")
    if not files:
        return 0
    saved = db.lock_timeout_s
    if lock_timeout_s is not None:
        db.lock_timeout_s = lock_timeout_s
    try:
        with db.write() as con:
            for f in files:
                path = str(f).replace("'", "''")
                if f.name.endswith(".samples.ndjson"):
                    con.execute(
                        # the path is our own batch file (quotes escaped); columns are constants
                        "INSERT INTO server_samples SELECT * FROM read_json("  # noqa: S608
                        f"'{path}', format='newline_delimited', columns={_columns_sql(SAMPLE_COLUMNS)})"
                    )
                else:
                    con.execute(
                        "INSERT INTO requests SELECT b.* FROM read_json("  # noqa: S608
                        f"'{path}', format='newline_delimited', columns={_columns_sql(REQUEST_COLUMNS)}) b "
                        "ANTI JOIN (SELECT id FROM requests WHERE run_id = ?) e ON b.id = e.id",
                        [run_id],
                    )
    finally:
        db.lock_timeout_s = saved
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
    return len(files)


class RecordWriter:
    """Background persistence of one run's records and server samples.

    Args:
        db: the store database (schema must exist).
        run_id: the run being written.
        flush_interval_s: how often batches are written and folded (the crash-loss window).
    """

    def __init__(self, db: Database, run_id: str, *, flush_interval_s: float = 1.0) -> None:
        self.db = db
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self._records: list[RequestRecord] = []
        self._samples: list[ServerSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.written = 0
        self.folder = pending_dir(db, run_id)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.folder}: {exc.strerror}") from None
        (self.folder / "writer.pid").write_text(str(os.getpid()))

    def start(self) -> None:
        """Start the background flusher."""
        self._thread = threading.Thread(target=self._loop, name=f"tailscope-writer-{self.run_id}", daemon=True)
        self._thread.start()

    def add(self, record: RequestRecord) -> None:
        """Queue one finished record (cheap; safe from any thread)."""
        with self._lock:
            self._records.append(record)

    def add_samples(self, samples: list[ServerSample]) -> None:
        """Queue scraped server samples."""
        with self._lock:
            self._samples.extend(samples)

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush(fold_timeout_s=0.5)
            except StoreError:
                continue  # the database is busy; batches wait on disk for the next tick
            except BaseException as exc:  # pragma: no cover - surfaced by close()
                self._error = exc
                return

    def flush(self, *, fold_timeout_s: float | None = None) -> None:
        """Write queued items to a batch file now, then fold pending batches into the database."""
        with self._lock:
            records, self._records = self._records, []
            samples, self._samples = self._samples, []
        if records:
            self._write_batch(f"{self._seq:08d}.ndjson", (encode_record_line(self.run_id, r) for r in records))
            self.written += len(records)
        if samples:
            self._write_batch(
                f"{self._seq:08d}.samples.ndjson",
                (json.dumps(sample_to_row(self.run_id, s), separators=(",", ":")) for s in samples),
            )
        if records or samples:
            self._seq += 1
            fold_pending(self.db, self.run_id, lock_timeout_s=fold_timeout_s)

    def _write_batch(self, name: str, lines: Iterable[str]) -> None:
        tmp = self.folder / (name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
                fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.folder / name)

    def close(self) -> None:
        """Stop the thread, flush everything and fold it with the normal lock timeout."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
        deadline = time.monotonic() + self.db.lock_timeout_s
        while fold_pending(self.db, self.run_id) and time.monotonic() < deadline:
            pass
        with contextlib.suppress(FileNotFoundError):
            (self.folder / "writer.pid").unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()
        if self._error is not None:
            raise StoreError(f"writing run {self.run_id} failed: {self._error}")
