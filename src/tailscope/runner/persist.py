"""The store side of a run, or nothing: a run writes a store only when it was given one.

:class:`RunPersistence` creates the run row, streams finished records and server samples to the store in the
background (:class:`~tailscope.store.writer.RecordWriter`: journaled every 0.2 s, then batch files folded into
DuckDB, so a ``kill -9`` loses only the last moments) and finishes the run with its summary. A store that cannot be
written (a full disk) never raises here: :attr:`RunPersistence.store_error` says what it could not keep, and
:attr:`RunPersistence.warnings` what it had to bound or set aside. Without a store every call is a no-op: the records
stay in memory in the result, and nothing is written anywhere.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tailscope.errors import StoreError
from tailscope.records import RequestRecord, Run, RunStatus, ServerSample

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore
    from tailscope.store.writer import RecordWriter


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
        """:meth:`check` in a thread, so that it overlaps the target's preflight (DuckDB's open and schema check
        take 30–200 ms, the network round trips as long): the first request leaves sooner."""
        if not self._checked:
            await asyncio.to_thread(self.check)

    @property
    def path(self) -> str | None:
        """The store file, or None when nothing is stored."""
        return None if self.store is None else str(self.store.db.path)

    def begin(self, run: Run) -> None:
        """Create the run row and start the background writer."""
        if self.store is None:
            return
        from tailscope.store.writer import RecordWriter

        self.check()
        self.store.create_run(run)
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
        try:
            w.close()
        except StoreError as exc:
            self.store_error = str(exc)
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
