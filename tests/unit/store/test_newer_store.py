"""A store written by a newer tailscope is refused, reading and writing, with one line naming it — never misread."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tailscope.errors import StoreError
from tailscope.store.db import SCHEMA_VERSION, Database
from tailscope.store.runs import RunStore


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    Database(db).ensure_schema()  # creates it at this version
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    for action in (lambda: RunStore(db).list_runs(), lambda: Database(db).ensure_schema()):
        with pytest.raises(StoreError, match="written by a newer tailscope") as info:
            action()
        assert str(db) in str(info.value)
        assert "\n" not in str(info.value)
