"""Interruption and durability: kill -9 loses at most the last flush interval; secrets never reach an artifact."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    for args in (("runs", "show", "latest"), ("runs", "show", "latest", "--json"), ("runs", "list")):
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
