"""Pending batches, quarantine and repair: a bad batch never blocks, stores never fold each other's runs, dead
writers are found, nothing is folded twice."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
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
from tailscope.store import faults
from tailscope.store.codec import encode_record_line
from tailscope.store.db import Database
from tailscope.store.pending import (
    WriterId,
    fold_pending,
    pending_dir,
    salvage_journals,
    this_writer,
    writer_alive,
)
from tailscope.store.runs import RunStore
from tailscope.store.writer import RecordWriter

DEAD_PID = 999_999_999


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


def dead_writer(db: Database, run_id: str) -> None:
    """Make ``run_id``'s writer look dead (a pid that does not exist), in its folder and its row."""
    folder = pending_dir(db, run_id)
    if folder.is_dir():
        (folder / "writer.json").write_text(json.dumps({"pid": DEAD_PID, "host": socket.gethostname()}))
    with db.write() as con:
        con.execute("UPDATE runs SET writer_pid = ? WHERE id = ?", [DEAD_PID, run_id])


def lines(run_id: str, ids: range) -> str:
    return "".join(encode_record_line(run_id, make_record(i)) + "\n" for i in ids)


def new_store(tmp_path: Path, name: str = "s.duckdb", run_id: str = "r1") -> tuple[Database, RunStore]:
    db = Database(tmp_path / name)
    store = RunStore(db)
    store.create_run(make_run(run_id))
    return db, store


def test_a_huge_value_is_bounded_and_the_store_keeps_folding(tmp_path: Path) -> None:
    db, store = new_store(tmp_path)
    w = RecordWriter(db, "r1", flush_interval_s=3600)
    huge = RequestRecord(
        id=0, scheduled_ns=0, sent_ns=1, first_token_ns=None, end_ns=2, status=Status.ERROR,
        requested_output_tokens=10**12, error_detail="\ud800 odd", tokens_source=TokensSource.CHUNKS,
    )  # fmt: skip
    w.add(huge)
    w.add(make_record(1))
    w.add_samples([ServerSample(t_ns=1, name="vllm:x", value=float("nan"))])
    w.close()
    got = store.load_records("r1")
    assert [r.id for r in got] == [0, 1]
    assert got[0].requested_output_tokens is None
    assert got[0].error_detail is not None
    assert "odd" in got[0].error_detail
    assert any("requested_output_tokens" in line for line in w.notes.lines())
    assert len(store.load_samples("r1")) == 1
    assert store.list_runs()[0].requests is not None


def test_a_corrupt_batch_is_salvaged_and_quarantined_never_blocking(tmp_path: Path) -> None:
    db, store = new_store(tmp_path)
    folder = pending_dir(db, "r1")
    folder.mkdir(parents=True)
    good = lines("r1", range(0, 5))
    (folder / "00000000-a.ndjson").write_text(good)
    bad = lines("r1", range(5, 8)) + '{"id": 9, "status": "ok"\n' + "\x00garbage\n" + lines("r1", range(10, 12))
    (folder / "00000001-a.ndjson").write_text(bad)
    (folder / "00000002-a.ndjson").write_text("{}\n")  # valid JSON, but not a record
    result = fold_pending(db, "r1", folder=folder)
    assert [r.id for r in store.load_records("r1")] == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]
    assert set(result.quarantined) >= {"00000001-a.ndjson", "00000002-a.ndjson"}
    assert not any(folder.iterdir())
    q = store.quarantined("r1")
    assert {p.path.name for p in q} == {"00000001-a.ndjson", "00000002-a.ndjson"}
    reason = (db.quarantine_root / "r1" / "00000001-a.ndjson.reason").read_text()
    assert "line 4: not JSON" in reason
    assert "line 5: not JSON" in reason
    # the store keeps folding
    (folder / "00000003-a.ndjson").write_text(lines("r1", range(20, 22)))
    fold_pending(db, "r1", folder=folder)
    assert len(store.load_records("r1")) == 12


def test_a_fold_is_exactly_once_even_after_a_crash_between_commit_and_delete(tmp_path: Path) -> None:
    db, store = new_store(tmp_path)
    folder = pending_dir(db, "r1")
    folder.mkdir(parents=True)
    batch = folder / "00000000-a.samples.ndjson"
    text = '{"run_id":"r1","t_ns":1,"name":"m","labels":"","value":1.5}\n'
    batch.write_text(text)
    fold_pending(db, "r1", folder=folder)
    batch.write_text(text)  # the same batch again, as if the delete never happened
    fold_pending(db, "r1", folder=folder)
    assert store.load_samples("r1") == [ServerSample(t_ns=1, name="m", value=1.5)]


def test_two_stores_in_one_folder_never_fold_each_others_runs(tmp_path: Path) -> None:
    db_a, store_a = new_store(tmp_path, "a.duckdb", "ra")
    db_b, store_b = new_store(tmp_path, "b.duckdb", "rb")
    RecordWriter(db_a, "ra", flush_interval_s=3600)
    (pending_dir(db_a, "ra") / "00000000-a.ndjson").write_text(lines("ra", range(3)))
    dead_writer(db_a, "ra")
    dead_writer(db_b, "rb")
    report_b = store_b.repair()
    assert report_b.run_ids == ["rb"]  # b's own crashed run, nothing of a's
    assert (pending_dir(db_a, "ra") / "00000000-a.ndjson").exists()
    with db_b.read() as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    assert store_a.repair().run_ids == ["ra"]
    assert len(store_a.load_records("ra")) == 3


def test_a_legacy_shared_pending_folder_folds_only_into_the_store_that_has_the_run(tmp_path: Path) -> None:
    _, store_a = new_store(tmp_path, "a.duckdb", "ra")
    _, store_b = new_store(tmp_path, "b.duckdb", "rb")
    legacy = tmp_path / "pending" / "ra"  # tailscope ≤ 0.1: pending/<run id>/ beside every store
    legacy.mkdir(parents=True)
    (legacy / "00000000.ndjson").write_text(lines("ra", range(4)))
    (legacy / "writer.pid").write_text(str(DEAD_PID))
    store_b.repair()
    assert legacy.is_dir()
    assert "ra" in store_a.repair().run_ids
    assert len(store_a.load_records("ra")) == 4
    assert not legacy.exists()


def test_a_dead_writers_open_journal_is_salvaged_line_by_line(tmp_path: Path) -> None:
    db, store = new_store(tmp_path)
    folder = pending_dir(db, "r1")
    folder.mkdir(parents=True)
    (folder / "00000000-a.ndjson.open").write_text(lines("r1", range(3)) + '{"run_id":"r1","id":3,"sch')
    assert salvage_journals(folder) == 1
    dead_writer(db, "r1")
    report = store.repair()
    assert report.repaired[0].rows_folded == 3
    assert report.repaired[0].marked_incomplete
    assert [r.id for r in store.load_records("r1")] == [0, 1, 2]


def test_a_run_whose_writer_died_is_marked_incomplete_with_the_writer_and_heartbeat(tmp_path: Path) -> None:
    db, store = new_store(tmp_path, run_id="r1")
    store.create_run(make_run("r2", "2026-11-29T09:00:00.000Z"))
    assert store.repair().repaired == ()  # this process writes both: alive
    dead_writer(db, "r1")
    report = store.repair()
    assert report.run_ids == ["r1"]
    got = store.get_run("r1")
    assert got.run.status is RunStatus.INCOMPLETE
    assert got.extra["crash"]["writer_pid"] == DEAD_PID
    assert got.extra["crash"]["last_heartbeat"]
    assert store.get_run("r2").run.status is RunStatus.RUNNING
    assert store.repair().repaired == ()  # idempotent


def test_a_reused_pid_is_not_taken_for_the_writer() -> None:
    me = this_writer()
    assert writer_alive(me, None)
    if me.start:  # Linux: the start token tells a reused pid apart
        assert not writer_alive(WriterId(me.pid, me.host, me.start + "0"), None)
    assert not writer_alive(WriterId(DEAD_PID, me.host), None)
    assert writer_alive(WriterId(DEAD_PID, "another-host"), 5.0)  # another host: the heartbeat decides
    assert not writer_alive(WriterId(DEAD_PID, "another-host"), 600.0)


def test_a_full_disk_is_retried_and_nothing_queued_is_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, store = new_store(tmp_path)
    monkeypatch.setenv(faults.ENV, "enospc@journal:3")
    monkeypatch.setattr(faults, "_hits", {})
    w = RecordWriter(db, "r1", flush_interval_s=3600)
    for i in range(3):
        w.add(make_record(i))
        w._journal_tick()
    assert w.unwritten == 3  # three full-disk failures so far: everything still queued
    assert w.io_error is not None
    assert not list(pending_dir(db, "r1").glob("*.open"))  # the journal never opened on the full disk
    for i in range(3, 6):
        w.add(make_record(i))
    w.close()
    assert [r.id for r in store.load_records("r1")] == list(range(6))


def test_a_write_cut_by_a_full_disk_leaves_no_half_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import tailscope.store.writer as writer_mod

    db, store = new_store(tmp_path)
    w = RecordWriter(db, "r1", flush_interval_s=3600)
    w.add(make_record(0))
    w._journal_tick()
    real = writer_mod._write_all

    def half_then_full(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "_write_all", half_then_full)
    w.add(make_record(1))
    w.add(make_record(2))
    w._journal_tick()
    assert w.unwritten == 2
    monkeypatch.setattr(writer_mod, "_write_all", real)
    w.close()
    assert [r.id for r in store.load_records("r1")] == [0, 1, 2]
    assert store.quarantined() == []


def test_a_disk_that_stays_full_is_reported_with_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, store = new_store(tmp_path)
    monkeypatch.setenv(faults.ENV, "enospc@journal:1000000")
    monkeypatch.setattr(faults, "_hits", {})
    monkeypatch.setattr("tailscope.store.writer.CLOSE_RETRY_S", 0.3)
    w = RecordWriter(db, "r1", flush_interval_s=3600)
    for i in range(4):
        w.add(make_record(i))
    with pytest.raises(StoreError, match=r"could not write 4 of the records.*No space left"):
        w.close()
    assert store.list_runs()[0].run.id == "r1"  # the store stays readable


def test_delete_removes_runs_with_their_rows_and_files(tmp_path: Path) -> None:
    db, store = new_store(tmp_path, run_id="20261129-080000-aaaaaa")
    store.create_run(make_run("20261129-090000-bbbbbb", "2026-11-29T09:00:00.000Z"))
    store.write_records("20261129-080000-aaaaaa", [make_record(i) for i in range(3)])
    store.tag("20261129-080000-aaaaaa", "main")
    with pytest.raises(StoreError, match="still being written"):
        store.delete_runs(["20261129-08"])  # this process is its writer and it is running
    store.finish_run("20261129-080000-aaaaaa", RunStatus.COMPLETE, None)
    (db.quarantine_root / "20261129-080000-aaaaaa").mkdir(parents=True)
    assert store.delete_runs(["20261129-08"]) == ["20261129-080000-aaaaaa"]
    assert [r.run.id for r in store.list_runs()] == ["20261129-090000-bbbbbb"]
    assert store.load_records("20261129-080000-aaaaaa") == []
    assert not (db.quarantine_root / "20261129-080000-aaaaaa").exists()
    with pytest.raises(NotFoundError):
        store.delete_runs(["zzz"])


def test_probe_runs_are_tagged_and_never_latest(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(make_run("20261129-080000-aaaaaa", "2026-11-29T08:00:00.000Z"))
    store.create_run(replace(make_run("20261129-090000-bbbbbb", "2026-11-29T09:00:00.000Z"), probe="calibrate"))
    assert store.resolve_id("latest") == "20261129-080000-aaaaaa"
    assert store.resolve_id("latest:probe") == "20261129-090000-bbbbbb"
    stored = store.get_run("20261129-09")
    assert stored.run.probe == "calibrate"
    assert stored.tags == ("probe",)


def test_request_counts_come_from_the_stored_records(tmp_path: Path) -> None:
    _, store = new_store(tmp_path)
    store.write_records("r1", [make_record(i) for i in range(7)])  # id 0 is warmup; ids 3, 6 failed
    counts = store.list_runs()[0].requests
    assert counts is not None
    assert counts.to_dict() == {"total": 6, "completed": 4, "failed": 2, "incomplete": 0, "warmup": 1}


def test_a_store_of_an_older_version_is_read_and_upgraded(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR); INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE runs (id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, tool_version VARCHAR, started_at VARCHAR,"
        " finished_at VARCHAR, target_url VARCHAR, target_model VARCHAR, target_json VARCHAR, seed BIGINT,"
        " settings_json VARCHAR, profile VARCHAR, status VARCHAR, sweep_id VARCHAR, host_json VARCHAR,"
        " summary_json VARCHAR, extra_json VARCHAR);"
        "CREATE TABLE tags (run_id VARCHAR, tag VARCHAR, created_at VARCHAR);"
        "INSERT INTO runs (id, kind, started_at, status, seed) VALUES ('old1', 'bench', '2026', 'running', 0)"
    )
    con.close()
    store = RunStore(path)
    assert store.resolve_id("latest") == "old1"
    assert store.repair().repaired == ()  # an old run with no writer facts is left as it is
    assert store.list_runs()[0].run.status is RunStatus.RUNNING
    assert os.path.exists(path)


def test_a_running_writer_seals_every_flush_but_folds_at_its_fold_interval(tmp_path: Path) -> None:
    """Sealing (the power-loss window) keeps its pace; folding — a DuckDB open, ~15–20 ms of CPU each — waits for the
    fold interval (issue 20), and close folds everything at once."""
    import time

    db, store = new_store(tmp_path)
    w = RecordWriter(db, "r1", flush_interval_s=0.05, journal_interval_s=0.01, fold_interval_s=3600)
    w.start()
    for i in range(5):
        w.add(make_record(i))
    folder = pending_dir(db, "r1")
    deadline = time.monotonic() + 10
    while not any(p.name.endswith(".ndjson") for p in folder.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # several seal ticks: none of them folds
    assert any(p.name.endswith(".ndjson") for p in folder.iterdir())  # sealed, waiting for the fold
    assert store.load_records("r1") == []
    w.close()
    assert [r.id for r in store.load_records("r1")] == list(range(5))
    assert not folder.exists()


def test_the_background_tick_hands_the_gil_back_between_records_and_writes_the_same_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread's tick releases the GIL between records once it has held it ``YIELD_AFTER_S`` (a run's event
    loop then waits for about that, not the interpreter's 5 ms switch interval); what it journals is the same either
    way — yielding after every record, after some, or never."""
    import tailscope.store.writer as writer_mod

    journals, yields = [], []
    for run_id, yield_gil, after_s in (("r1", False, 0.0), ("r2", True, 0.0), ("r3", True, 3600.0)):
        db, _ = new_store(tmp_path, f"{run_id}.duckdb", run_id)
        w = RecordWriter(db, run_id, flush_interval_s=3600)
        for i in range(5):
            w.add(make_record(i))
        slept: list[float] = []
        with monkeypatch.context() as m:
            m.setattr(writer_mod.time, "sleep", slept.append)
            m.setattr(writer_mod, "YIELD_AFTER_S", after_s)
            w._journal_tick(yield_gil=yield_gil)
        yields.append(slept)
        j = w._journals["records"]
        assert j is not None
        journals.append(j.path.read_bytes().replace(run_id.encode(), b"RUN"))
        w.close()
    assert journals[0] == journals[1] == journals[2]
    # none without yield_gil; with it, one per record when each record outlasts the budget, none within it
    assert yields == [[], [0] * 5, []]
