"""Interruption and durability: kill -9 loses at most the last flush interval; secrets never reach an artifact."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tailscope.records import RunStatus
from tailscope.store.runs import RunStore
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration

FLUSH_S = 1.0  # RecordWriter's flush interval: the promised loss window


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_loses_at_most_the_last_flush_interval(tmp_path: Path, seed: int) -> None:
    db = tmp_path / "db.duckdb"
    kill_after = random.Random(seed).uniform(2.0, 4.0)
    with ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=5)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailscope",
                "bench",
                "--url",
                srv.url,
                "--rate",
                "25",
                "--arrival",
                "constant",
                "--duration",
                "60",
                "--output-tokens",
                "6",
                "--db",
                str(db),
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # wait until the run really started (first request reached the server), then kill at a random point
        deadline = time.time() + 30
        while not srv.truth.token_ns and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
        killed_at = time.perf_counter_ns()
        proc.wait(10)
        finished = {rid: times[-1] for rid, times in srv.truth.token_ns.items() if len(times) == 6}
    # the store opens and the crashed run is repaired (folded + marked incomplete) on the next command
    listing = cli("runs", "list", "--json", "-", "--db", str(db))
    assert listing.returncode == 0, listing.stderr
    runs = json.loads(listing.stdout)
    assert runs[0]["run"]["status"] == RunStatus.INCOMPLETE.value
    stored = {r.server_request_id for r in RunStore(db).load_records(runs[0]["run"]["id"]) if r.ok}
    missing_ages_s = [(killed_at - t) / 1e9 for rid, t in finished.items() if rid not in stored]
    assert len(stored) >= 20
    # records completed more than one flush interval (+ scheduling slack) before the kill are all there
    assert all(age <= FLUSH_S + 0.5 for age in missing_ages_s), sorted(missing_ages_s)[-5:]


def test_api_key_never_reaches_any_artifact(tmp_path: Path) -> None:
    sentinel = "sk-tailscope-SENTINEL-7f3a9c"
    env = {"OPENAI_API_KEY": sentinel}
    db = tmp_path / "store" / "db.duckdb"
    outputs: list[str] = []
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        p = cli(
            "bench",
            "--url",
            srv.url,
            "--requests",
            "8",
            "--concurrency",
            "2",
            "--db",
            str(db),
            "--json",
            str(tmp_path / "out.json"),
            "--html",
            str(tmp_path / "report.html"),
            "--quiet",
            env=env,
        )
        assert p.returncode == 0, p.stderr
        outputs += [p.stdout, p.stderr]
        # the key was really used on the wire
        assert srv.truth.authorization
        assert all(a == f"Bearer {sentinel}" for a in srv.truth.authorization)
    for fmt in ("json", "csv", "parquet"):
        q = cli("runs", "export", "latest", "--format", fmt, "--out", str(tmp_path / f"export.{fmt}"), "--db", str(db))
        assert q.returncode == 0, q.stderr
        outputs += [q.stdout, q.stderr]
    for args in (("runs", "show", "latest"), ("runs", "show", "latest", "--json", "-"), ("runs", "list")):
        q = cli(*args, "--db", str(db))
        outputs += [q.stdout, q.stderr]
    # an error path: a target that refuses, with the key set
    q = cli("bench", "--url", "http://127.0.0.1:9", "--requests", "1", "--db", str(db), env=env)
    outputs += [q.stdout, q.stderr]
    for text in outputs:
        assert sentinel not in text
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert any(f.suffix == ".duckdb" for f in files)
    assert any(f.suffix == ".html" for f in files)
    for f in files:
        assert sentinel.encode() not in f.read_bytes(), f


def test_unwritable_store_fails_before_any_load(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        p = cli("bench", "--url", srv.url, "--requests", "5", "--db", str(blocker / "db.duckdb"), "--quiet")
        served = len(srv.truth.arrived_ns)
    assert p.returncode == 1
    assert "cannot create the store folder" in p.stderr
    assert "Traceback" not in p.stderr
    assert served == 0


def test_a_file_that_is_not_a_store_fails_before_any_load(tmp_path: Path) -> None:
    """The store is opened and checked while the target's preflight runs (they overlap), but both finish before the
    first request: a file that is not a DuckDB store stops the run with nothing sent."""
    bogus = tmp_path / "notes.duckdb"
    bogus.write_bytes(b"these are my notes, not a database\n" * 100)
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        p = cli("bench", "--url", srv.url, "--requests", "5", "--db", str(bogus), "--quiet")
        served = len(srv.truth.arrived_ns)
    assert p.returncode != 0
    assert str(bogus) in p.stderr
    assert "Traceback" not in p.stderr
    assert served == 0
    assert bogus.read_bytes().startswith(b"these are my notes")  # left as it was


# -- the store's crash-and-fault matrix ------------------------------------------------------------------------------
# Each case runs a real bench (a subprocess against the scripted server on 127.0.0.1) and breaks it at one phase of
# the writer (`TAILSCOPE_TEST_FAULT`, see store/faults.py), then checks with the CLI that the store opens, the run is
# marked incomplete, and every record the writer had handed to the store (rows in DuckDB + complete lines on disk) is
# stored exactly once.

#: journal:1 = before anything reached the disk; journal:3 = journaled, not yet sealed (the first flush); seal:2 =
#: fsynced, not renamed; fold:2 = inside the DuckDB transaction; folded:2 = committed, batch files not yet deleted.
KILL_PHASES = ["journal:1", "journal:3", "seal:2", "fold:2", "folded:2"]
JOURNAL_S = 0.2  # RecordWriter.journal_interval_s: the kill -9 loss window
SLACK_S = 0.8  # the client's own delay between a server's last byte and its record, on a loaded 2-core machine


def bench_args(url: str, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tailscope", "bench", "--url", url, "--db", str(db), "--quiet", *extra]


def handed_to_store(db: Path, run_id: str) -> set[int]:
    """Record ids a dead writer had handed to the store: committed rows, and complete lines in its pending files."""
    committed, sealed, journaled = store_parts(db, run_id)
    return committed | sealed | journaled


def store_parts(db: Path, run_id: str) -> tuple[set[int], set[int], set[int]]:
    """(ids committed in DuckDB, ids in sealed batch files, ids in open journals) of a run."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        committed = {int(r[0]) for r in con.execute("SELECT id FROM requests WHERE run_id = ?", [run_id]).fetchall()}
    finally:
        con.close()
    sealed: set[int] = set()
    journaled: set[int] = set()
    for f in (db.parent / "pending" / db.name / run_id).glob("*"):
        if "samples" in f.name or not (f.name.endswith(".ndjson") or f.name.endswith(".ndjson.open")):
            continue
        for line in f.read_bytes().split(b"\n"):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                (journaled if f.name.endswith(".open") else sealed).add(int(json.loads(line)["id"]))
    return committed, sealed, journaled


def only_run_id(db: Path) -> str:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return str(con.execute("SELECT id FROM runs").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


def killed_bench(url: str, db: Path, phase: str) -> tuple[int, int, int]:
    """Run a bench that kills itself at ``phase``; (return code, its pid, perf_counter_ns when it was seen dead)."""
    proc = subprocess.Popen(
        bench_args(url, db, "--rate", "40", "--arrival", "constant", "--duration", "30", "--output-tokens", "4"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TAILSCOPE_TEST_FAULT": f"kill@{phase}"},
    )
    rc = proc.wait(90)
    return rc, proc.pid, time.perf_counter_ns()


@pytest.mark.parametrize("phase", KILL_PHASES)
def test_kill_9_at_every_phase_keeps_every_record_handed_to_the_store(tmp_path: Path, phase: str) -> None:
    db = tmp_path / "s" / "a.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        rc, pid, died_ns = killed_bench(srv.url, db, phase)
        finished = {rid: times[-1] for rid, times in srv.truth.token_ns.items() if len(times) == 4}
    assert rc == -signal.SIGKILL
    run_id = only_run_id(db)
    committed, sealed, journaled = store_parts(db, run_id)
    handed = committed | sealed | journaled
    # each phase left the store in the state it names
    if phase == "journal:1":
        assert not handed
    elif phase in ("journal:3", "seal:2"):
        assert journaled  # in the journal only: no fsync, no rename
    elif phase == "fold:2":
        assert sealed - committed  # the transaction died: its batches are on disk, their rows are not committed
    elif phase == "folded:2":
        assert sealed & committed  # committed, and the batch files are still there (never folded twice)
    listing = cli("runs", "list", "--json", "-", "--db", str(db))
    assert listing.returncode == 0, listing.stderr
    assert "Traceback" not in listing.stderr
    run = json.loads(listing.stdout)[0]
    assert run["run"]["status"] == RunStatus.INCOMPLETE.value
    assert run["crash"]["writer_pid"] == pid
    stored = RunStore(db).load_records(run_id)
    ids = [r.id for r in stored]
    assert len(ids) == len(set(ids))  # folded exactly once, whatever the phase
    assert set(ids) == handed  # nothing the writer handed to the store is lost
    assert run["requests"]["total"] == len(ids)
    # and what the writer had not handed over yet is only the last moments before the kill
    ok = {r.server_request_id for r in stored if r.ok}
    ages_s = sorted((died_ns - t) / 1e9 for rid, t in finished.items() if rid not in ok)
    assert all(age <= JOURNAL_S + SLACK_S for age in ages_s), ages_s[-5:]
    assert not (db.parent / "pending" / db.name / run_id).exists()
    again = cli("runs", "repair", "--db", str(db))
    assert again.returncode == 0, again.stderr
    assert "repaired 0 run(s)" in again.stdout


def test_kill_9_after_the_final_fold_keeps_every_record(tmp_path: Path) -> None:
    """A short run keeps the store open from its final fold to its finish (one DuckDB instance for both, issue 20):
    killed right after that fold committed — its rows in DuckDB's write-ahead log, not yet checkpointed into the
    file — the store opens, every record the server finished is stored once, and the run is marked incomplete."""
    db = tmp_path / "s" / "a.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        proc = subprocess.Popen(
            # 1 s: the writer's only fold is the final one (it folds every 5 s while a run goes)
            bench_args(srv.url, db, "--rate", "20", "--arrival", "constant", "--duration", "1", "--output-tokens", "4"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TAILSCOPE_TEST_FAULT": "kill@folded:1"},
        )
        rc = proc.wait(90)
        finished = {rid for rid, times in srv.truth.token_ns.items() if len(times) == 4}
    assert rc == -signal.SIGKILL
    run_id = only_run_id(db)
    committed, _sealed, journaled = store_parts(db, run_id)
    assert committed
    assert not journaled
    listing = cli("runs", "list", "--json", "-", "--db", str(db))
    assert listing.returncode == 0, listing.stderr
    run = json.loads(listing.stdout)[0]
    assert run["run"]["status"] == RunStatus.INCOMPLETE.value
    stored = RunStore(db).load_records(run_id)
    ids = [r.id for r in stored]
    assert len(ids) == len(set(ids))
    assert len(finished) >= 15
    assert {r.server_request_id for r in stored if r.ok} == finished


def test_a_corrupt_batch_is_quarantined_and_never_blocks_the_store(tmp_path: Path) -> None:
    from tailscope.records import RequestRecord, Run, RunKind, Status, Target
    from tailscope.store.codec import encode_record_line
    from tailscope.store.db import Database

    def record(i: int) -> RequestRecord:
        return RequestRecord(id=i, scheduled_ns=i, sent_ns=i, first_token_ns=i + 1, end_ns=i + 2, status=Status.OK)

    db = Database(tmp_path / "s.duckdb")
    store = RunStore(db)
    store.create_run(Run("r-corrupt", RunKind.BENCH, "0", "2026-12-01T00:00:00Z", Target("u", "m"), 0))
    folder = db.pending_root / "r-corrupt"
    folder.mkdir(parents=True)
    good = "".join(encode_record_line("r-corrupt", record(i)) + "\n" for i in range(6))
    (folder / "00000000-a.ndjson").write_text(good[: len(good) // 2] + "\x00\xff garbage\n" + good[len(good) // 2 :])
    (folder / "00000001-a.ndjson").write_bytes(b"\xff\xfe\x00 not json at all\n")
    (folder / "writer.json").write_text(json.dumps({"pid": 999_999_999, "host": socket.gethostname()}))
    with db.write() as con:
        con.execute("UPDATE runs SET writer_pid = 999999999")
    for _ in range(2):  # the second listing finds the quarantine again, and still lists
        listing = cli("runs", "list", "--json", "-", "--db", str(db.path))
        assert listing.returncode == 0, listing.stderr
        assert "quarantined" in listing.stderr
        assert "Traceback" not in listing.stderr
        run = json.loads(listing.stdout)[0]
        assert {Path(q["path"]).name for q in run["quarantined"]} == {"00000000-a.ndjson", "00000001-a.ndjson"}
    assert run["run"]["status"] == RunStatus.INCOMPLETE.value
    stored = [r.id for r in RunStore(db.path).load_records("r-corrupt")]
    assert len(stored) >= 5  # every line but the one the garbage cut
    repair = cli("runs", "repair", "--db", str(db.path))
    assert repair.returncode == 0
    assert "2 batch(es) in quarantine" in repair.stdout


def test_two_stores_in_one_folder_keep_their_own_unsaved_records(tmp_path: Path) -> None:
    a, b = tmp_path / "s" / "a.duckdb", tmp_path / "s" / "b.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        p = cli(*bench_args(srv.url, b, "--requests", "5")[3:])
        assert p.returncode == 0, p.stderr
        rc, _, _ = killed_bench(srv.url, a, "seal:2")  # a's last batch is journaled, not yet folded
    assert rc == -signal.SIGKILL
    run_a = only_run_id(a)
    handed = handed_to_store(a, run_a)
    listing_b = cli("runs", "list", "--json", "-", "--db", str(b))
    assert listing_b.returncode == 0, listing_b.stderr
    runs_b = json.loads(listing_b.stdout)
    assert [r["run"]["id"] for r in runs_b] != [run_a]
    assert runs_b[0]["requests"]["total"] == 5
    assert handed_to_store(a, run_a) == handed  # b folded nothing of a's
    listing_a = cli("runs", "list", "--json", "-", "--db", str(a))
    assert listing_a.returncode == 0, listing_a.stderr
    assert {r.id for r in RunStore(a).load_records(run_a)} == handed


def test_one_huge_number_never_breaks_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        p = cli(
            *bench_args(
                srv.url,
                db,
                "--requests",
                "3",
                "--output-tokens",
                "1000000000000",
                "--timeout-total",
                "0.5",
                "--no-fail",
            )[3:]
        )
    assert "Traceback" not in p.stderr
    if p.returncode != 0:  # refused before any load (a bound on the flag): one line, and a store left as it was
        assert p.returncode == 1, p.stderr
        assert len(p.stderr.strip().splitlines()) <= 3, p.stderr
    for args in (("runs", "list"), ("runs", "repair"), ("runs", "list", "--json", "-")):
        q = cli(*args, "--db", str(db))
        assert q.returncode == 0, q.stderr
    if p.returncode == 0:
        run = json.loads(q.stdout)[0]
        assert run["requests"]["total"] == 3
        assert any("requested_output_tokens" in w for w in run["summary"]["warnings"])


def _bench_in_process(url: str, db: Path, requests: int) -> Any:
    import asyncio

    from tailscope.runner.bench import run_bench
    from tailscope.runner.bench_config import BenchConfig
    from tailscope.runner.loadgen import DispatchConfig
    from tailscope.workload.lengths import fixed
    from tailscope.workload.simple import LoadShape, simple_requests

    cfg = BenchConfig(url=url, model=None, dispatch=DispatchConfig(concurrency=4), metrics_url=None)
    shape = LoadShape(concurrency=4, requests=requests)
    return asyncio.run(run_bench(cfg, simple_requests(shape, fixed(8), fixed(4), seed=0), store=RunStore(db)))


def test_a_disk_full_for_a_while_loses_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tailscope.store import faults

    monkeypatch.setenv(faults.ENV, "enospc@journal:6,enospc@seal:2")
    monkeypatch.setattr(faults, "_hits", {})
    db = tmp_path / "s.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        res = _bench_in_process(srv.url, db, 120)
    assert res.store_error is None
    assert res.exit_code == 0
    stored = RunStore(db).load_records(res.run.id)
    assert sorted(r.id for r in stored) == sorted(r.id for r in res.records)
    assert RunStore(db).get_run(res.run.id).run.status is RunStatus.COMPLETE


def test_a_disk_that_stays_full_fails_the_run_clearly_and_keeps_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailscope.store import faults

    monkeypatch.setattr("tailscope.store.writer.CLOSE_RETRY_S", 0.5)
    db = tmp_path / "s.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        monkeypatch.setenv(faults.ENV, "enospc@journal:1000000000")
        monkeypatch.setattr(faults, "_hits", {})
        res = _bench_in_process(srv.url, db, 20)
    assert res.store_error is not None
    assert "No space left on device" in res.store_error
    assert res.exit_code == 1
    assert res.summary.requests.completed == 20  # the result itself is whole
    listing = cli("runs", "list", "--json", "-", "--db", str(db))
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)[0]["run"]["status"] == RunStatus.INCOMPLETE.value


TINY_FS = r"""
set -u
mount -t tmpfs -o size=3m tmpfs "$MNT" || exit 99
dd if=/dev/zero of="$MNT/filler" bs=64k count=12 status=none
"$PY" -m tailscope bench --url "$URL" --requests 1000 --concurrency 16 --output-tokens 24 --db "$MNT/s.duckdb" \
    --quiet > "$OUT/bench.out" 2> "$OUT/bench.err"
echo $? > "$OUT/bench.rc"
rm -f "$MNT/filler"
"$PY" -m tailscope runs repair --db "$MNT/s.duckdb" > "$OUT/repair.out" 2> "$OUT/repair.err"
echo $? > "$OUT/repair.rc"
"$PY" -m tailscope runs list --json "$OUT/list.json" --db "$MNT/s.duckdb" 2> "$OUT/list.err"
echo $? > "$OUT/list.rc"
cp "$MNT/s.duckdb" "$OUT/" 2>/dev/null; cp "$MNT/s.duckdb.wal" "$OUT/" 2>/dev/null
exit 0
"""


def test_a_real_full_filesystem_keeps_the_store_readable_and_what_reached_the_disk(tmp_path: Path) -> None:
    """A 3 MiB tmpfs in a user namespace (no root needed): the bench fills it, then space is freed."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no unprivileged user namespaces here to mount a tiny filesystem: {probe.stderr!r}")
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    with ScriptedServer(ScriptedConfig(ttft_ms=2, itl_ms=1, log=False)) as srv:
        env = {**os.environ, "MNT": str(mnt), "OUT": str(out), "PY": sys.executable, "URL": srv.url}
        p = subprocess.run(["unshare", "-rm", "sh", "-c", TINY_FS], env=env, timeout=300, check=False)
    if p.returncode == 99:
        pytest.skip("tmpfs cannot be mounted in a user namespace here")
    bench_err = (out / "bench.err").read_text()
    assert "Traceback" not in bench_err
    assert (out / "bench.rc").read_text().strip() == "1", bench_err
    assert "No space left on device" in bench_err
    assert (out / "repair.rc").read_text().strip() == "0", (out / "repair.err").read_text()
    assert (out / "list.rc").read_text().strip() == "0", (out / "list.err").read_text()
    run = json.loads((out / "list.json").read_text())[0]
    assert run["run"]["status"] == RunStatus.INCOMPLETE.value
    kept = re.search(r"([\d,]+) are kept", bench_err)
    if kept:  # the journal filled up: exactly what it holds reached the store
        assert run["requests"]["total"] + run["requests"]["warmup"] == int(kept.group(1).replace(",", ""))
    else:  # the database filled up first: every record waited on disk and is folded now
        assert run["requests"]["total"] == 1000


def test_runs_delete_and_list_json_to_a_file(tmp_path: Path) -> None:
    from tailscope.records import Run, RunKind, Target

    db = tmp_path / "s.duckdb"
    store = RunStore(db)
    for i, probe in ((1, None), (2, "find-max")):
        run = Run(f"2026120{i}-000000-aaaaaa", RunKind.BENCH, "0", f"2026-12-0{i}T00:00:00Z", Target("u", "m"), 0)
        store.create_run(replace(run, probe=probe))
        store.finish_run(run.id, RunStatus.COMPLETE, None)
    out = tmp_path / "runs" / "list.json"
    p = cli("runs", "list", "--json", str(out), "--db", str(db))
    assert p.returncode == 0, p.stderr
    runs = json.loads(out.read_text())
    assert [(r["run"]["id"], r["run"]["probe"], r["tags"]) for r in runs] == [
        ("20261202-000000-aaaaaa", "find-max", ["probe"]),
        ("20261201-000000-aaaaaa", None, []),
    ]
    assert runs[0]["requests"] == {"total": 0, "completed": 0, "failed": 0, "incomplete": 0, "warmup": 0}
    shown = cli("runs", "show", "latest", "--json", "-", "--db", str(db))
    assert json.loads(shown.stdout)["run"]["id"] == "20261201-000000-aaaaaa"  # a probe is never latest
    p = cli("runs", "delete", "20261201", "nope", "--db", str(db))
    assert p.returncode == 1
    assert "no run 'nope'" in p.stderr
    p = cli("runs", "delete", "20261201", "latest:probe", "--db", str(db))
    assert p.returncode == 0, p.stderr
    assert "deleted 2 run(s)" in p.stdout
    assert RunStore(db).list_runs() == []
