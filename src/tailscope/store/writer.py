"""Incremental, crash-safe persistence of a running run.

The run hands records to a :class:`RecordWriter` (thread-safe, never blocking the caller). A background thread:

1. **journals** — every ``journal_interval_s`` (0.2 s) checks and bounds each queued value
   (:mod:`tailscope.store.bounds`), and appends the lines to the run's open journal with one ``write``: from then on
   the kernel holds them, so a ``kill -9`` of the run loses only what finished in the last ~0.2 s. The tick is fixed,
   never woken per record: woken as each stream finished (every 50 ms at most), the thread competed for the GIL while
   the event loop was busy and delayed token timestamps by milliseconds on a loaded machine (the fault matrix's 5 ms
   check failed 2 of 4 times; at a fixed 0.2 s, as often as before this journal: 1 in 14 vs 1 in 8). The thread hands
   the GIL back once it has encoded for ``YIELD_AFTER_S`` (0.1 ms; a 256-token record takes ≈ 50 µs, a short answer
   a few µs — yielding after every record cost more than encoding a short one): holding it for a whole tick, it made
   the event loop wait out the interpreter's 5 ms switch interval (``benchmarks/writer_gil.py``: 7–13 wake-ups of
   the loop thread, each 5–7 ms late, during a 512-record tick, against 250–355 with a p99 of 1.4–3.2 ms when it
   yielded after every record, ≈ 100 with a p99 of 0.5–0.8 ms, max 1.3–1.6 ms, after every 0.1 ms);
2. **seals** — once per ``flush_interval_s`` (1 s) fsyncs the journal and renames it to a sealed batch: the
   power-loss window;
3. **folds** — once per ``fold_interval_s`` (5 s) folds the sealed batches into DuckDB in one short transaction
   (:func:`~tailscope.store.pending.fold_pending`: exactly once, bad batches quarantined) and stamps the run's
   heartbeat. Not every second: each fold opens the database, and a DuckDB instance costs ~15–20 ms of CPU to open
   and close on any machine — folding every second was the largest part of the store's cost in a bench's client CPU
   (issue 20); sealing stays at 1 s, so the power-loss window does not change, only how soon readers see the rows.

If another process holds the database, batches wait on disk for the next tick. If the disk is full, lines stay in
memory and are retried every tick (the journal is cut back to its last whole line first); :meth:`RecordWriter.close`
says how many records it could not write. The folder lives under the store's own key
(:func:`~tailscope.store.pending.pending_dir`), with ``writer.json`` naming this process; the next ``runs list`` or
``runs repair`` folds what a dead writer left (:mod:`tailscope.store.repair`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tailscope.errors import StoreError
from tailscope.records import RequestRecord, ServerSample
from tailscope.store import faults
from tailscope.store.bounds import BoundNotes, bound_row, sample_row_problem
from tailscope.store.codec import request_line, sample_to_row
from tailscope.store.db import SAMPLE_COLUMNS, Database
from tailscope.store.pending import (
    WRITER_FILE,
    fold_pending,
    pending_dir,
    quarantine_lines,
    this_writer,
    write_writer_file,
)

__all__ = ["RecordWriter", "fold_pending", "pending_dir"]

#: How long :meth:`RecordWriter.close` keeps retrying a full disk before it reports what it could not write.
CLOSE_RETRY_S = 5.0

#: How often a running writer folds its sealed batches into DuckDB (at least every ``flush_interval_s``).
FOLD_INTERVAL_S = 5.0

#: Whether the background thread yields the GIL between records it encodes (see :meth:`RecordWriter._encode`).
YIELD_GIL = True

#: How long (s) the background thread encodes, holding the GIL, before it hands it back: a run's event loop waits at
#: most this and one record's encoding. Not after every record: a yield is a syscall and, with the loop waiting, a
#: GIL hand-off both ways (≈ 20 µs of CPU each here), more than a short answer's encoding (≈ 3–12 µs; issue 20).
YIELD_AFTER_S = 100e-6

_KINDS = {"records": ".ndjson", "samples": ".samples.ndjson"}


@dataclass(slots=True)
class _Journal:
    path: Path
    fd: int
    size: int = 0  # bytes of whole lines written
    rows: int = 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class RecordWriter:
    """Background persistence of one run's records and server samples.

    Args:
        db: the store database (schema must exist).
        run_id: the run being written.
        flush_interval_s: how often batches are sealed (fsynced): the power-loss window.
        journal_interval_s: the tick of journal writes (the ``kill -9`` loss window).
        fold_interval_s: how often sealed batches are folded into DuckDB while the run goes (never more often than
            they are sealed); :meth:`close` and :meth:`flush` fold at once.

    Raises:
        StoreError: when the run's pending folder cannot be created.
    """

    def __init__(
        self,
        db: Database,
        run_id: str,
        *,
        flush_interval_s: float = 1.0,
        journal_interval_s: float = 0.2,
        fold_interval_s: float = FOLD_INTERVAL_S,
    ) -> None:
        self.db = db
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self.journal_interval_s = journal_interval_s
        self.fold_interval_s = max(fold_interval_s, flush_interval_s)
        self.notes = BoundNotes()
        self.written = 0  # records handed to the kernel (journaled)
        self.quarantined: list[str] = []
        self.io_error: OSError | None = None
        self._records: list[RequestRecord] = []
        self._samples: list[ServerSample] = []
        self._lines: dict[str, list[bytes]] = {k: [] for k in _KINDS}
        self._journals: dict[str, _Journal | None] = dict.fromkeys(_KINDS)
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._token = secrets.token_hex(3)
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_seal = self._last_fold = time.monotonic()
        self.folder = pending_dir(db, run_id)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_writer_file(self.folder, this_writer(), run_id, db.path)
        except OSError as exc:
            raise StoreError(f"cannot create {self.folder}: {exc.strerror}") from None

    def start(self) -> None:
        """Start the background journaling and folding."""
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

    @property
    def unwritten(self) -> int:
        """Records queued or encoded but not yet in a journal (non-zero while the disk is full)."""
        with self._lock:
            return len(self._records) + len(self._lines["records"])

    # -- the background thread ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        # a fixed tick, never woken per record: the thread must not compete for the GIL right when the event loop is
        # busy with a finishing stream (a woken writer there delayed token timestamps by milliseconds)
        while not self._stop.wait(self.journal_interval_s):
            try:
                self._journal_tick(yield_gil=YIELD_GIL)
                now = time.monotonic()
                if now - self._last_seal >= self.flush_interval_s:
                    self._seal()
                if now - self._last_fold >= self.fold_interval_s:
                    self._last_fold = now  # a busy database is retried at the next fold, not at every tick
                    fold = fold_pending(self.db, self.run_id, lock_timeout_s=0.5, heartbeat=True)
                    self.quarantined += fold.quarantined
            except (StoreError, OSError):
                pass  # the database is busy or the disk full: batches wait on disk for the next tick
            except BaseException as exc:  # pragma: no cover - surfaced by close()
                self._error = exc
                return

    def _encode(self, yield_gil: bool = False) -> None:
        with self._lock:
            records, self._records = self._records, []
            samples, self._samples = self._samples, []
        bad: dict[str, list[str]] = {"records": [], "samples": []}
        out = self._lines["records"]
        clock = time.perf_counter
        held_since = clock()
        for record in records:
            line, problem = request_line(self.run_id, record, self.notes)
            if problem:
                bad["records"].append(line[:-1].decode() + "\t" + problem)
            else:
                out.append(line)
            if yield_gil and clock() - held_since >= YIELD_AFTER_S:
                # hand the GIL back once it has been held ~0.1 ms (one 256-token record's encoding is ~50 µs): a run's
                # event loop waiting to stamp a token must not wait out the interpreter's 5 ms switch interval — or, on
                # a busy machine, this thread's whole time off the CPU when it is descheduled holding the GIL (issue 20)
                time.sleep(0)
                held_since = clock()
        for sample in samples:
            row = bound_row(sample_to_row(self.run_id, sample), SAMPLE_COLUMNS, self.notes)
            # the stdlib keeps NaN and ±inf (Prometheus has them); orjson would write null
            text = json.dumps(row, separators=(",", ":"))
            problem = sample_row_problem(row)
            if problem:
                bad["samples"].append(text + "\t" + problem)
            else:
                self._lines["samples"].append(text.encode() + b"\n")
        for kind, rows in bad.items():
            if rows:
                name = f"unstorable-{self._token}{_KINDS[kind]}"
                self.quarantined.append(name)
                why = f"{len(rows)} {kind} cannot be stored (see each line)"
                try:
                    quarantine_lines(self.db, self.run_id, name, rows, why)
                except OSError as exc:  # a full disk: they cannot be kept aside either; say so in the warnings
                    self.notes.add(kind, f"{len(rows)} unstorable rows", f"not kept aside: {exc.strerror}")

    def _journal_tick(self, yield_gil: bool = False) -> None:
        """Bound and encode what was queued, and append it to the open journals (kept in memory when that fails);
        ``yield_gil``: let other threads run between records (the background thread's ticks)."""
        with self._io_lock:
            self._encode(yield_gil)
            for kind, lines in self._lines.items():
                if not lines:
                    continue
                j = self._journals[kind]
                try:
                    faults.hit("journal")
                    if j is None:
                        j = self._open_journal(kind)
                    _write_all(j.fd, b"".join(lines))  # each line ends in its newline
                except OSError as exc:
                    self.io_error = exc
                    if j is not None:
                        with contextlib.suppress(OSError):
                            os.ftruncate(j.fd, j.size)  # never leave half a line before the retry
                            os.lseek(j.fd, j.size, os.SEEK_SET)
                    continue
                j.size = os.lseek(j.fd, 0, os.SEEK_CUR)
                j.rows += len(lines)
                if kind == "records":
                    self.written += len(lines)
                lines.clear()
                self.io_error = None

    def _open_journal(self, kind: str) -> _Journal:
        path = self.folder / f"{self._seq:08d}-{self._token}{_KINDS[kind]}.open"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._seq += 1
        j = _Journal(path, fd)
        self._journals[kind] = j
        return j

    def _seal(self) -> None:
        """Fsync and rename the open journals into sealed batches; stamp the heartbeat."""
        with self._io_lock:
            ready: list[tuple[str, _Journal]] = []
            for kind, j in self._journals.items():
                if j is None or not j.rows:
                    continue
                try:
                    os.fsync(j.fd)
                except OSError as exc:
                    self.io_error = exc
                    continue  # kept open: retried at the next seal
                ready.append((kind, j))
            if ready:
                try:
                    faults.hit("seal")
                except OSError as exc:
                    self.io_error = exc
                    ready = []  # kept open: retried at the next seal
            for kind, j in ready:
                os.close(j.fd)
                try:
                    os.replace(j.path, j.path.with_suffix(""))
                except OSError as exc:  # pragma: no cover - a rename in one folder does not fail for space
                    self.io_error = exc  # the journal stays on disk, salvaged by `runs repair`
                self._journals[kind] = None
            sealed = bool(ready)
            if sealed:
                with contextlib.suppress(OSError):
                    dir_fd = os.open(self.folder, os.O_RDONLY)
                    try:
                        os.fsync(dir_fd)  # the renames survive a power loss too
                    finally:
                        os.close(dir_fd)
            with contextlib.suppress(OSError):
                os.utime(self.folder / WRITER_FILE)  # the heartbeat
            self._last_seal = time.monotonic()

    # -- explicit calls -------------------------------------------------------------------------------------------
    def flush(self, *, fold_timeout_s: float | None = None) -> None:
        """Journal, seal and fold everything queued now."""
        self._journal_tick()
        self._seal()
        fold = fold_pending(self.db, self.run_id, lock_timeout_s=fold_timeout_s, heartbeat=True)
        self.quarantined += fold.quarantined

    def close(self) -> None:
        """Stop the thread, then write, seal and fold everything (retrying a full disk for a few seconds).

        Raises:
            StoreError: naming how many records could not be written or folded, and what to do; what reached the
                disk stays in the run's pending folder for ``tailscope runs repair``.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        deadline = time.monotonic() + CLOSE_RETRY_S
        fold_error: StoreError | None = None
        while True:
            self._journal_tick()
            self._seal()
            try:
                self.quarantined += fold_pending(self.db, self.run_id, heartbeat=True).quarantined
                fold_error = None
            except StoreError as exc:
                fold_error = exc
            except OSError as exc:  # setting a bad batch aside on a full disk
                fold_error = StoreError(f"cannot fold: {exc.strerror}")
            left = self.unwritten
            waiting = any(p.name.endswith(".ndjson") for p in self.folder.iterdir()) if self.folder.is_dir() else False
            if (not left and not waiting and not self._open_rows()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        unsealed = self._open_rows()
        for j in self._journals.values():  # what they hold stays on disk for `runs repair`
            if j is not None:
                with contextlib.suppress(OSError):
                    os.close(j.fd)
        self._journals = dict.fromkeys(_KINDS)
        if self._error is not None:
            raise StoreError(f"writing run {self.run_id} failed: {self._error}")
        reason = self.io_error.strerror if self.io_error is not None else None
        if left:
            raise StoreError(
                f"the store could not write {left:,} of the records of run {self.run_id} to {self.folder} "
                f"({reason or 'unknown'}); {self.written:,} are kept — free space, then `tailscope runs repair` "
                "folds them"
            )
        if unsealed or waiting:
            raise StoreError(
                f"records of run {self.run_id} wait in {self.folder}: {reason or fold_error or 'the store is busy'} "
                "— `tailscope runs repair` folds them once the store can be written"
            )
        with contextlib.suppress(FileNotFoundError):
            (self.folder / WRITER_FILE).unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()

    def _open_rows(self) -> int:
        return sum(j.rows for j in self._journals.values() if j is not None)
