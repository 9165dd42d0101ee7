"""The business layer: a real SQLite database (stdlib ``sqlite3``) behind a bounded connection pool.

Queries run in a thread per connection; a request waits for a free connection first (the ``db pool wait`` span),
so a pool smaller than the concurrency shows up as queueing, the method's pool-exhaustion incident. Each query also
holds its connection for the preset's modelled cost (``business.query``), as a remote database would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

USERS = 1000


class SqlitePool:
    """``size`` connections to one SQLite file in a temporary folder (created and filled by :meth:`open`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._free: asyncio.Queue[sqlite3.Connection] = asyncio.Queue()
        self._all: list[sqlite3.Connection] = []
        self._executor: ThreadPoolExecutor | None = None

    @property
    def in_use(self) -> int:
        return len(self._all) - self._free.qsize()

    def open(self) -> None:
        """Create the database (users, history) and the connections."""
        self._tmp = tempfile.TemporaryDirectory(prefix="tailscope-app-")
        path = Path(self._tmp.name) / "app.sqlite"
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, tier TEXT, quota INTEGER)")
            db.execute(
                "CREATE TABLE history (id INTEGER PRIMARY KEY, user_id INTEGER, question TEXT, answer TEXT, at REAL)"
            )
            db.executemany(
                "INSERT INTO users VALUES (?, ?, ?, ?)",
                ((i, f"user-{i}", ("gold", "silver", "basic")[i % 3], 1000) for i in range(USERS)),
            )
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="tailscope-app-db")
        for _ in range(self.size):
            conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
            self._all.append(conn)
            self._free.put_nowait(conn)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        for conn in self._all:
            conn.close()
        self._all.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def acquire(self) -> sqlite3.Connection:
        """Wait for a free connection."""
        return await self._free.get()

    def release(self, conn: sqlite3.Connection) -> None:
        self._free.put_nowait(conn)

    async def run(self, conn: sqlite3.Connection, sql: str, params: tuple[Any, ...], hold_s: float) -> list[Any]:
        """Run ``sql`` on ``conn`` in its thread, holding the connection ``hold_s`` seconds in all (the modelled
        server time); returns the rows."""
        assert self._executor is not None

        def work() -> list[Any]:
            start = time.perf_counter()
            rows = conn.execute(sql, params).fetchall()
            if sql.lstrip().upper().startswith("INSERT"):
                conn.commit()
            left = hold_s - (time.perf_counter() - start)
            if left > 0:
                time.sleep(left)
            return rows

        return await asyncio.get_running_loop().run_in_executor(self._executor, work)
