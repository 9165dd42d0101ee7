"""The store side of a run, or nothing: a run writes a store only when it was given one.

:class:`RunPersistence` creates the run row, streams finished records and server samples to the store in the
background (:class:`~tailscope.store.writer.RecordWriter`: journaled every 0.2 s, then batch files folded into
DuckDB, so a ``kill -9`` loses only the last moments) and finishes the run with its summary. A store that cannot be
written (a full disk) never raises here: :attr:`RunPersistence.store_error` says what it could not keep, and
:attr:`RunPersistence.warnings` what it had to bound or set aside. Without a store every call is a no-op: the records
stay in memory in the result, and nothing is written anywhere.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from tailscope.errors import StoreError
from tailscope.records import RequestRecord, Run, RunStatus, ServerSample

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore
    from tailscope.store.writer import RecordWriter

#: A run of at most this many records keeps the store open from its final fold to its finish (its summary takes
#: milliseconds); a longer one opens the store for each step, so that other processes never wait long for it.
HOLD_MAX_RECORDS = 10_000


class RunPersistence:
    """Persist one run into ``store`` (or nowhere when ``store`` is None).

    Args:
        store: the run store, or None for a run that is kept in memory only.
        flush_interval_s: how often the background writer flushes (the crash-loss window).
    """

    def __init__(self, store: RunStore | None, *, flush_interval_s: float = 1.0, check_now: bool = True) -> None:
        self.store = store
        self.flush_interval_s = flush_interval_s
        self._writer: RecordWriter | None = None
        self.store_error: str | None = None
        self.warnings: tuple[str, ...] = ()
        self._checked = store is None
        self._release: weakref.finalize[Any, Any] | None = None
        if store is not None and check_now:
            self.check()

    def check(self) -> None:
        """Open the store and check its schema (once): a bad store path fails here, before any load.

        Raises:
            StoreError: the store cannot be opened or is not a tailscope store.
        """
        if not self._checked and self.store is not None:
            self.store.db.ensure_schema()
            self._checked = True

    async def check_async(self) -> None:
        """The store's folder, checked while the target's preflight runs; the database itself is opened, and its
        schema checked, by :meth:`begin`, in the transaction that creates the run row — still before any load, and
        one DuckDB open fewer than a separate check (an open and close cost ~25 ms of CPU; issue 20).

        Raises:
            StoreError: the folder cannot be created or written.
        """
        if not self._checked and self.store is not None:
            self.store.db.prepare_folder()

    @property
    def path(self) -> str | None:
        """The store file, or None when nothing is stored."""
        return None if self.store is None else str(self.store.db.path)

    def begin(self, run: Run) -> None:
        """Create the run row and start the background writer."""
        if self.store is None:
            return
        from tailscope.store.writer import RecordWriter

        self.store.create_run(run)  # the schema check (unless check() ran) and the row, in one transaction
        self._checked = True
        self._writer = RecordWriter(self.store.db, run.id, flush_interval_s=self.flush_interval_s)
        self._writer.start()

    def add(self, record: RequestRecord) -> None:
        """Queue one finished record."""
        if self._writer is not None:
            self._writer.add(record)

    def add_samples(self, samples: list[ServerSample]) -> None:
        """Queue scraped server samples."""
        if self._writer is not None:
            self._writer.add_samples(samples)

    def close(self) -> None:
        """Flush what is queued and stop the writer (idempotent); never raises for the disk (see the module)."""
        w, self._writer = self._writer, None
        if w is None:
            return
        if self.store is not None and w.written + w.unwritten <= HOLD_MAX_RECORDS:
            # the final fold, reading the records back and :meth:`finish` share one DuckDB instance (two opens
            # fewer); released by finish(), or when this object goes away without it. A long run's summary takes
            # too long to keep other processes waiting for the store: its steps open the store each.
            self.store.db.keep_open()
            self._release = weakref.finalize(self, self.store.db.release)
        try:
            w.close()
        except StoreError as exc:
            self.store_error = str(exc)
        except BaseException:
            self._release_store()
            raise
        warnings = list(w.notes.lines())
        if w.quarantined:
            warnings.append(
                f"store: {len(w.quarantined)} batch(es) could not be stored and were set aside in "
                f"{w.db.quarantine_root / w.run_id} (see `tailscope runs repair`)"
            )
        if self.store_error:
            warnings.append(self.store_error)
        self.warnings = tuple(warnings)

    def finish(self, run_id: str, status: RunStatus, summary: dict[str, Any]) -> None:
        """Store the run's final status and summary (a store that cannot be written sets :attr:`store_error`)."""
        if self.store is None:
            return
        try:
            self.store.finish_run(run_id, status, summary)
        except StoreError as exc:
            self.store_error = self.store_error or (
                f"{exc} — the run's records are kept; `tailscope runs repair` marks it incomplete"
            )
        finally:
            self._release_store()

    def _release_store(self) -> None:
        if self._release is not None:
            self._release()  # closes the instance kept open since close() (once; a finalizer runs at most once)
            self._release = None
