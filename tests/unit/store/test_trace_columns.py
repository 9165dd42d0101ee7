"""Trace ids in the store: written, read back, exported; a store from before the columns existed still opens."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import duckdb

from tailscope.records import RequestRecord, Run, RunKind, Status, Target, TokensSource
from tailscope.store.db import REQUEST_COLUMNS
from tailscope.store.runs import RunStore


def _run(run_id: str) -> Run:
    return Run(
        id=run_id, kind=RunKind.BENCH, tool_version="0.1.0", started_at="2026-12-02T10:00:00.000Z",
        target=Target(url="http://127.0.0.1:1", model="m"), seed=1,
    )  # fmt: skip


def _record(i: int, traced: bool) -> RequestRecord:
    return RequestRecord(
        id=i, scheduled_ns=i, sent_ns=i + 1, first_token_ns=i + 5, end_ns=i + 9, status=Status.OK,
        chunk_times_ns=(i + 5, i + 9), chunk_tokens=(1, 1), tokens_source=TokensSource.USAGE,
        trace_id=f"{i + 1:032x}" if traced else None, span_id=f"{i + 1:016x}" if traced else None,
    )  # fmt: skip


def test_trace_ids_round_trip_through_the_store_and_parquet(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(_run("r1"))
    records = [_record(i, traced=i % 2 == 0) for i in range(4)]
    store.write_records("r1", records)
    assert store.load_records("r1") == records
    out = tmp_path / "r.parquet"
    store.export_requests("r1", out, fmt="parquet")
    con = duckdb.connect()
    rows = con.execute("SELECT id, trace_id, span_id FROM read_parquet(?) ORDER BY id", [str(out)]).fetchall()
    assert rows[0] == (0, f"{1:032x}", f"{1:016x}")
    assert rows[1] == (1, None, None)


def test_a_store_without_the_trace_columns_opens_and_takes_new_records(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    store = RunStore(path)
    store.create_run(_run("old"))
    store.write_records("old", [_record(0, traced=False)])
    # make it look like a schema-2 store: none of the columns added since (trace ids, answer/reasoning/cache)
    con = duckdb.connect(str(path))
    added = ("trace_id", "span_id", "first_answer_ns", "reasoning_tokens", "cached_tokens", "connection_reused")
    for name in (*added, "dns_ns", "connect_ns", "tls_ns", "step", "depends_on", "session_calls"):
        con.execute(f"ALTER TABLE requests DROP COLUMN {name}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    reopened = RunStore(path)
    assert reopened.load_records("old") == [_record(0, traced=False)]
    reopened.create_run(_run("new"))
    reopened.write_records("new", [_record(1, traced=True)])
    assert reopened.load_records("new")[0].trace_id == f"{2:032x}"
    names = [r[0] for r in duckdb.connect(str(path), read_only=True).execute("DESCRIBE requests").fetchall()]
    assert names == [n for n, _ in REQUEST_COLUMNS]
    assert replace(_record(1, True), trace_id=None).trace_id is None


def test_connection_phases_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run(_run("r1"))
    opened = replace(_record(0, False), connection_reused=False, dns_ns=2_800_000_000, connect_ns=300_000, tls_ns=None)
    reused = replace(_record(1, False), connection_reused=True)
    store.write_records("r1", [opened, reused])
    assert store.load_records("r1") == [opened, reused]


def test_agent_steps_round_trip_and_a_schema_5_store_still_opens(tmp_path: Path) -> None:
    """Step names and the calls waited for are stored; a store from before them (schema 5) opens, reads its old
    records without them and takes new records with them."""
    path = tmp_path / "s.duckdb"
    store = RunStore(path)
    store.create_run(_run("old"))
    old = [_record(0, False), replace(_record(1, False), session_id="s0", turn=1)]
    store.write_records("old", old)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE requests DROP COLUMN step")
    con.execute("ALTER TABLE requests DROP COLUMN depends_on")
    con.execute("ALTER TABLE requests DROP COLUMN session_calls")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    reopened = RunStore(path)
    assert reopened.load_records("old") == old
    reopened.create_run(_run("new"))
    plan = replace(_record(2, False), session_id="s1", turn=0, step="plan")
    search = [
        replace(_record(3 + k, False), session_id="s1", turn=1 + k, step="search", depends_on=(2,)) for k in (0, 1)
    ]
    answer = replace(_record(5, False), session_id="s1", turn=3, step="react/think", depends_on=(3, 4))
    reopened.write_records("new", [plan, *search, answer])
    assert reopened.load_records("new") == [plan, *search, answer]
    assert [r.step for r in reopened.load_records("old")] == [None, None]
    names = [r[0] for r in duckdb.connect(str(path), read_only=True).execute("DESCRIBE requests").fetchall()]
    assert names == [n for n, _ in REQUEST_COLUMNS]
    out = tmp_path / "r.parquet"
    reopened.export_requests("new", out, fmt="parquet")
    rows = duckdb.connect().execute("SELECT step, depends_on FROM read_parquet(?) ORDER BY id", [str(out)]).fetchall()
    assert rows == [("plan", []), ("search", [2]), ("search", [2]), ("react/think", [3, 4])]
    csv = tmp_path / "r.csv"
    reopened.export_requests("new", csv, fmt="csv")
    rows = duckdb.connect().execute("SELECT step, depends_on FROM read_csv(?) ORDER BY id", [str(csv)]).fetchall()
    assert [(s, json.loads(d)) for s, d in rows] == [
        ("plan", []),
        ("search", [2]),
        ("search", [2]),
        ("react/think", [3, 4]),
    ]


def test_session_calls_round_trip_and_a_schema_6_store_still_opens(tmp_path: Path) -> None:
    """The calls an agent session was drawn with are stored on each of its calls; a store from before them
    (schema 6) opens, reads its old records without them (None) and takes new records with them."""
    path = tmp_path / "s.duckdb"
    store = RunStore(path)
    store.create_run(_run("old"))
    old = [replace(_record(0, False), session_id="s0", turn=0, step="plan")]
    store.write_records("old", old)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE requests DROP COLUMN session_calls")
    con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    con.close()
    reopened = RunStore(path)
    assert reopened.load_records("old") == old
    reopened.create_run(_run("new"))
    new = [replace(_record(1 + k, False), session_id="s1", turn=k, step="plan", session_calls=3) for k in (0, 1)]
    reopened.write_records("new", new)
    assert reopened.load_records("new") == new
    assert reopened.load_records("old")[0].session_calls is None
    names = [r[0] for r in duckdb.connect(str(path), read_only=True).execute("DESCRIBE requests").fetchall()]
    assert names == [n for n, _ in REQUEST_COLUMNS]
    out = tmp_path / "r.parquet"
    reopened.export_requests("new", out, fmt="parquet")
    rows = duckdb.connect().execute("SELECT session_calls FROM read_parquet(?) ORDER BY id", [str(out)]).fetchall()
    assert rows == [(3,), (3,)]
