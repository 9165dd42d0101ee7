"""One DuckDB instance per process; each store operation attaches the store's file to it, and detaches it after.

Creating a DuckDB instance costs ≈ 25–30 ms of CPU (DuckDB 1.x–2.x, any machine: its catalog of functions is built per
instance, for an empty in-memory database too), and a store used to create one for every read, every write and every
fold of a running bench. Attaching a file to an instance that already exists costs ≈ 1–2 ms, and detaching it
checkpoints and closes the file and releases its lock exactly as closing an instance did: between operations this
process holds nothing, and another process can open the store (see :mod:`tailscope.store.db`).

A file attached read-write serves this process's readers too; one attached read-only while a write is asked for is
reported as locked (the caller retries, as for another process's lock). The instance belongs to the process that
created it: a forked child creates its own (DuckDB's threads do not survive a fork).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class _Attached:
    alias: str
    read_only: bool
    users: int = 0


class AttachConflict(Exception):
    """The file is attached read-only in this process and a write was asked for (a lock, to the caller)."""

    def __str__(self) -> str:
        return "the store is locked by a read in this process"


_lock = threading.Lock()
_host: Any = None
_host_pid = 0
_attached: dict[str, _Attached] = {}
_inherited: list[Any] = []
_attaches = 0  # since the instance was created
#: Attaches after which the instance is closed and created anew (when nothing is attached): see :func:`_recycle`.
RECYCLE_AFTER = 500
_names = itertools.count()


def _instance() -> Any:
    """The process's in-memory DuckDB instance (created on first use, again in a forked child)."""
    global _host, _host_pid
    if _host is None or _host_pid != os.getpid():
        import duckdb

        if _host is not None:
            # a parent's instance, inherited by fork: never closed here — its destructor would join threads that
            # did not survive the fork, and hang
            _inherited.append(_host)
        _host, _host_pid = duckdb.connect(), os.getpid()
        _attached.clear()  # a parent's attachments are not this process's
    return _host


def attach(path: Path, *, read_only: bool) -> Connection:
    """A connection to the store file at ``path``, attached for as long as some connection to it is open.

    Raises:
        AttachConflict: the file is attached read-only here and ``read_only`` is False.
        duckdb.Error: as ``duckdb.connect`` would raise it (a lock held by another process, a file that is not a
            DuckDB database).
    """
    global _attaches
    key = str(path.resolve())
    with _lock:
        host = _instance()
        entry = _attached.get(key)
        if entry is None:
            entry = _Attached(f"tailscope_store_{next(_names)}", read_only)
            quoted = key.replace("'", "''")
            host.execute(f"ATTACH '{quoted}' AS {entry.alias}" + (" (READ_ONLY)" if read_only else ""))
            _attached[key] = entry
            _attaches += 1
        elif entry.read_only and not read_only:
            raise AttachConflict
        entry.users += 1
        cursor = host.cursor()
    try:
        cursor.execute(f"USE {entry.alias}")
    except BaseException:
        cursor.close()
        _release(key)
        raise
    return Connection(key, cursor)


def _release(key: str) -> None:
    with _lock:
        entry = _attached.get(key)
        if entry is None or _host_pid != os.getpid():
            return
        entry.users -= 1
        if entry.users <= 0:
            del _attached[key]
            _detach(entry.alias)
            _recycle()


def _recycle() -> None:
    """Close the instance after :data:`RECYCLE_AFTER` attaches, when nothing is attached: DuckDB keeps ≈ 2 KB per
    attach and detach for the instance's life (1.3 MB an hour for a bench folding every 5 s; a soak's RSS must stay
    flat); a new instance costs ≈ 27 ms once per that many operations."""
    global _host, _attaches
    if _attaches >= RECYCLE_AFTER and not _attached:
        host, _host, _attaches = _host, None, 0
        host.close()


def _detach(alias: str) -> None:
    """Detach a store file: checkpoint it, close it, release its lock.

    A checkpoint that fails (a full disk) still detaches the file, as closing an instance did, and raises nothing:
    what was committed is in the write-ahead log, which the next open replays (the checkpoint is retried then).
    """
    import duckdb

    try:
        _host.execute(f"DETACH {alias}")
    except duckdb.Error:
        attached = _host.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = ?", [alias])
        if attached.fetchone()[0]:  # pragma: no cover - DuckDB detaches before it reports the failed checkpoint
            with contextlib.suppress(duckdb.Error):
                _host.execute(f"DETACH {alias}")
    _host.execute("RESET threads")  # a reader may have set it for the instance


class Connection:
    """A DuckDB cursor on one attached store file; :meth:`close` detaches the file when its last user closes."""

    def __init__(self, key: str, cursor: Any) -> None:
        self._key = key
        self._cursor: Any = cursor

    def execute(self, query: str, parameters: Any = None) -> Any:
        """Run ``query`` (the cursor, for ``fetchone``/``fetchall``/``description``)."""
        return self._cursor.execute(query, parameters)

    def cursor(self) -> Connection:
        """Another connection to the same attached file (for another thread)."""
        with _lock:
            entry = _attached[self._key]
            entry.users += 1
            cursor = _instance().cursor()
        cursor.execute(f"USE {entry.alias}")
        return Connection(self._key, cursor)

    def close(self) -> None:
        """Close the cursor; detach the file when no other connection uses it (idempotent)."""
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            cursor.close()
            _release(self._key)
