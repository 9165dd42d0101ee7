"""The DuckDB store: records round-trip, batches fold exactly once, crashed runs are repaired."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tailscope.errors import NotFoundError, StoreError
from tailscope.records import (
    ErrorClass,
    RequestRecord,
    Run,
    RunKind,
    RunStatus,
    ServerSample,
    Status,
    Target,
    TokensSource,
)
from tailscope.store.codec import encode_record_line
from tailscope.store.db import Database
from tailscope.store.runs import RunStore
from tailscope.store.writer import RecordWriter, fold_pending, pending_dir


def make_run(run_id: str, started: str = "2026-11-29T08:00:00.000Z") -> Run:
    return Run(
        id=run_id,
        kind=RunKind.BENCH,
        tool_version="0.1.0",
        started_at=started,
        target=Target(url="http://127.0.0.1:1", model="m"),
        seed=7,
        settings={"concurrency": 4},
    )


def make_record(i: int) -> RequestRecord:
    return RequestRecord(
        id=i,
        scheduled_ns=i * 1000,
        sent_ns=i * 1000 + 5,
        first_token_ns=i * 1000 + 50,
        end_ns=i * 1000 + 90,
        status=Status.OK if i % 3 else Status.ERROR,
        error=None if i % 3 else ErrorClass.HTTP_5XX,
        chunk_times_ns=(i * 1000 + 50, i * 1000 + 90),
        chunk_tokens=(1, 2),
        output_tokens=3,
        input_tokens=11,
        tokens_source=TokensSource.USAGE,
        server_request_id=f"req-{i}",
        request_class="short" if i % 2 else "long",
        warmup=i == 0,
    )


def test_records_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(make_run("r1"))
    records = [make_record(i) for i in range(50)]
    store.write_records("r1", records)
    assert store.load_records("r1") == records
    store.finish_run("r1", RunStatus.COMPLETE, {"requests": {"total": 50}})
    got = store.get_run("r1")
    assert got.run.status is RunStatus.COMPLETE
    assert got.summary == {"requests": {"total": 50}}
    assert got.run.settings == {"concurrency": 4}


def test_writer_flushes_and_folds_exactly_once(tmp_path: Path) -> None:
    db = Database(tmp_path / "s.duckdb")
    store = RunStore(db)
    store.create_run(make_run("r2"))
    w = RecordWriter(db, "r2", flush_interval_s=3600)
    for i in range(10):
        w.add(make_record(i))
    w.add_samples([ServerSample(t_ns=1, name="vllm:num_requests_waiting", value=3.0)])
    w.flush()
    assert len(store.load_records("r2")) == 10
    # simulate a crash between commit and delete: the same batch file folded again adds nothing
    folder = pending_dir(db, "r2")
    (folder / "00000000-x.ndjson").write_text(
        "\n".join(encode_record_line("r2", make_record(i)) for i in range(5)) + "\n"
    )
    fold_pending(db, "r2")
    assert len(store.load_records("r2")) == 10
    w.close()
    assert store.load_samples("r2") == [ServerSample(t_ns=1, name="vllm:num_requests_waiting", value=3.0)]
    assert not folder.exists()


def test_repair_folds_a_dead_writers_batches(tmp_path: Path) -> None:
    db = Database(tmp_path / "s.duckdb")
    store = RunStore(db)
    store.create_run(make_run("r3"))
    RecordWriter(db, "r3", flush_interval_s=3600)
    # a sealed batch that was never folded, then "die": a writer pid that is not alive, in the folder and the row
    (pending_dir(db, "r3") / "00000000-x.ndjson").write_text(
        "".join(encode_record_line("r3", make_record(i)) + "\n" for i in range(4))
    )
    (pending_dir(db, "r3") / "writer.json").write_text(json.dumps({"pid": 999999999, "host": socket.gethostname()}))
    with db.write() as con:
        con.execute("UPDATE runs SET writer_pid = 999999999")
    assert store.repair().run_ids == ["r3"]
    assert len(store.load_records("r3")) == 4
    assert store.get_run("r3").run.status is RunStatus.INCOMPLETE


def test_resolve_latest_prefix_and_tags(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(make_run("20261129-080000-aaaaaa", "2026-11-29T08:00:00.000Z"))
    store.create_run(make_run("20261129-090000-bbbbbb", "2026-11-29T09:00:00.000Z"))
    assert store.resolve_id("latest") == "20261129-090000-bbbbbb"
    assert store.resolve_id("20261129-08") == "20261129-080000-aaaaaa"
    store.tag("20261129-080000-aaaaaa", "main")
    assert store.resolve_id("latest:main") == "20261129-080000-aaaaaa"
    assert [r.run.id for r in store.list_runs(tag="main")] == ["20261129-080000-aaaaaa"]
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.resolve_id("20261129")
    with pytest.raises(NotFoundError, match="no run 'zzz'"):
        store.resolve_id("zzz")
    with pytest.raises(NotFoundError, match="tagged 'nightly'"):
        store.resolve_id("latest:nightly")


def test_unwritable_store_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    db = Database(blocker / "sub" / "s.duckdb")
    with pytest.raises(StoreError, match="cannot create the store folder"):
        db.ensure_schema()


def test_reading_a_missing_store_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `tailscope bench` first"):
        RunStore(tmp_path / "none.duckdb").get_run("latest")


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every DuckDB instance opened from now on (its read_only flag)."""
    import duckdb

    opened: list[bool] = []
    real = duckdb.connect

    def connect(*args: object, read_only: bool = False, **kw: object) -> object:
        opened.append(read_only)
        return real(*args, read_only=read_only, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", connect)
    return opened


def test_create_run_checks_the_schema_in_its_own_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new store's schema and the run row take one DuckDB open (an open and close cost ~25 ms of CPU)."""
    opened = _count_opens(monkeypatch)
    store = RunStore(tmp_path / "new" / "s.duckdb")
    store.create_run(make_run("r1"))
    assert len(opened) == 1
    assert store.get_run("r1").run.status is RunStatus.RUNNING
    with pytest.raises(StoreError):  # the row's transaction fails as a whole, and the store stays usable
        RunStore(tmp_path / "new" / "s.duckdb").create_run(make_run("r1"))
    store.create_run(make_run("r2"))
    assert {r.run.id for r in store.list_runs()} == {"r1", "r2"}


def test_keep_open_serves_every_step_from_one_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between keep_open and release, the final fold, reading the records back and finishing the run share one
    DuckDB instance; each is still its own committed transaction, readable from another thread and, after the
    release, from another connection."""
    import threading

    db = Database(tmp_path / "s.duckdb")
    store = RunStore(db)
    store.create_run(make_run("r1"))
    writer = RecordWriter(db, "r1", flush_interval_s=3600)
    records = [make_record(i) for i in range(20)]
    for r in records:
        writer.add(r)
    opened = _count_opens(monkeypatch)
    db.keep_open()
    try:
        writer.close()  # journal, seal and fold
        assert store.load_records("r1") == records
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(len(store.load_records("r1"))))
        t.start()
        t.join()
        assert seen == [20]
        store.finish_run("r1", RunStatus.COMPLETE, {"requests": {"total": 20}})
    finally:
        db.release()
    assert len(opened) == 1
    db.release()  # idempotent
    again = RunStore(tmp_path / "s.duckdb")  # another Database object: a read-only instance of its own
    assert again.get_run("r1").run.status is RunStatus.COMPLETE
    assert again.load_records("r1") == records
    assert len(opened) > 1
    assert all(opened[1:])  # each read opened (and closed) an instance of its own again
