"""The process's one DuckDB instance: the store file is attached per operation and released after it, so other
processes can open the store between operations; a forked child gets an instance of its own."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_pending import make_run

from tailscope.errors import StoreError
from tailscope.records import RunStatus
from tailscope.store import instance
from tailscope.store.db import Database
from tailscope.store.runs import RunStore


def _open_elsewhere(path: Path) -> subprocess.CompletedProcess[str]:
    code = "import duckdb, sys; print(duckdb.connect(sys.argv[1]).execute('SELECT count(*) FROM runs').fetchone()[0])"
    return subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_another_process_opens_the_store_for_writing_between_operations(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(make_run("r1"))
    assert store.get_run("r1").run.status is RunStatus.RUNNING
    other = _open_elsewhere(tmp_path / "s.duckdb")  # read-write: it needs the lock no one here holds
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "1"
    assert not instance._attached  # nothing stays attached


def test_a_write_waits_for_a_read_of_this_process_then_goes_ahead(tmp_path: Path) -> None:
    db = Database(tmp_path / "s.duckdb", lock_timeout_s=10)
    store = RunStore(db)
    store.create_run(make_run("r1"))
    done: list[float] = []
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        t = threading.Thread(target=lambda: (store.finish_run("r1", RunStatus.COMPLETE, {}), done.append(1.0)))
        t.start()
        time.sleep(0.3)
        assert not done  # the file is attached read-only: the write waits as for another process's lock
    t.join(10)
    assert done
    assert store.get_run("r1").run.status is RunStatus.COMPLETE


def test_a_write_blocked_by_a_read_of_this_process_says_the_store_is_locked(tmp_path: Path) -> None:
    db = Database(tmp_path / "s.duckdb", lock_timeout_s=0.2)
    RunStore(db).create_run(make_run("r1"))
    with db.read(), pytest.raises(StoreError, match="locked"), db.write():
        pass


def _child(path: str, out: multiprocessing.Queue[object]) -> None:
    try:
        store = RunStore(path)
        store.create_run(make_run("child"))
        out.put(sorted(r.run.id for r in store.list_runs()))
    except BaseException as exc:  # pragma: no cover - reported to the parent
        out.put(repr(exc))


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_uses_an_instance_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    RunStore(path).create_run(make_run("parent"))  # the parent's instance exists before the fork
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[object] = ctx.Queue()
    p = ctx.Process(target=_child, args=(str(path), out))
    p.start()
    got = out.get(timeout=60)
    p.join(60)
    assert got == ["child", "parent"]
    assert p.exitcode == 0


def test_the_instance_is_created_anew_after_many_attaches_and_the_store_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB keeps ≈ 2 KB per attach for an instance's life: a soak's RSS must stay flat."""
    monkeypatch.setattr(instance, "RECYCLE_AFTER", 3)
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(make_run("r1"))
    first = instance._instance()
    seen = {id(first)}
    for _ in range(8):
        assert store.get_run("r1").run.status is RunStatus.RUNNING
        seen.add(id(instance._instance()))
    assert len(seen) > 1
    assert not instance._attached
