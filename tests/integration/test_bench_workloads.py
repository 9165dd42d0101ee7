"""Workload profiles, sessions, replay, sweeps, capacity search, mixed traffic and dialects over real loopback sockets.

The scripted server is the ground truth: it logs when each request arrived, counts prompt words as
``usage.prompt_tokens`` (the approximate prompt synthesizer writes one word per token) and, with ``capacity``, serves
at most that many requests at once — a target whose capacity is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailscope.api.bench import _point
from tailscope.api.runs import show_run
from tailscope.errors import ConfigError
from tailscope.records import RequestRecord
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.options import BenchOptions
from tailscope.runner.progress import Progress
from tailscope.runner.resolve import resolve
from tailscope.runner.sweep_run import probe_passed, run_find_max, run_sweep
from tailscope.store.runs import RunStore
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.spec import RequestSpec
from tailscope.workload.sweep import parse_sweep

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def args_for(url: str, db: Path | None = None, **kw: Any) -> BenchOptions:
    """Bench options for the scripted server: short prompts and outputs (unless a profile or trace sets them), no
    scraping; ``kw`` are set on top. (``db`` is where the caller stores the run.)"""
    lengths = {} if "profile" in kw or "replay" in kw else {"input_tokens": "16", "output_tokens": "4"}
    base: dict[str, Any] = {
        **lengths,
        "timeout_connect": 5.0,
        "timeout_first_token": 30.0,
        "timeout_total": 60.0,
        "metrics_url": "off",
    }
    return BenchOptions(url=url, **{**base, **kw})


def execute(cfg: BenchConfig, specs: Iterator[RequestSpec], progress: Progress, db: Path | None = None) -> BenchResult:
    store = RunStore(db) if db is not None else None
    return asyncio.run(run_bench(replace(cfg, handle_signals=False), specs, progress=progress, store=store))


def run_args(a: BenchOptions, db: Path | None = None) -> BenchResult:
    r = resolve(a)
    return execute(r.config, r.specs, r.progress, db)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def rel_arrivals_s(srv: ScriptedServer, res: BenchResult) -> dict[str, float]:
    """Server-side arrival time of each request, seconds since the run's t0 (same monotonic clock)."""
    return {rid: (t - res.t0_ns) / 1e9 for rid, t in srv.truth.arrived_ns.items()}


def test_session_context_grows_turn_by_turn_over_real_sockets(tmp_path: Path) -> None:
    prof = write(
        tmp_path / "chat.yaml",
        """
        name: chat
        classes:
          - name: conversation
            session: {turns: 4, think_time_s: 0.05}
            input_tokens: 7
            output_tokens: 5
        shared_prefix: {tokens: 10, variants: 2, share: 1.0}
        arrival: {mode: open, process: constant, stages: [{rate: 5, duration_s: 0.9}]}
        """,
    )
    # timed stages and no stop.duration_s: arrivals end at 0.9 s, the conversations run to their last turn
    with ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=2)) as srv:
        res = run_args(args_for(srv.url, profile=prof), tmp_path / "db.duckdb")
    sessions: dict[str, list[RequestRecord]] = {}
    for r in res.records:
        assert r.ok, r.error_detail
        assert r.session_id is not None
        sessions.setdefault(r.session_id, []).append(r)
    assert len(sessions) == 5
    for turns in sessions.values():
        turns.sort(key=lambda r: r.turn or 0)
        assert [r.turn for r in turns] == [0, 1, 2, 3]
        expected = 10 + 7  # turn 0: shared prefix + new text
        for k, r in enumerate(turns):
            # usage.prompt_tokens counts every word the server received: history (prompts + responses) + new text
            assert r.input_tokens == expected, (k, r.input_tokens, expected)
            assert r.shared_prefix  # later turns start with the prefix too (inside their history), sent once
            expected += 5 + 7
            if k > 0:
                prev = turns[k - 1]
                assert prev.end_ns is not None
                assert r.scheduled_ns == pytest.approx(prev.end_ns + 50_000_000, abs=2_000_000)
                assert r.sent_ns is not None
                assert r.sent_ns >= r.scheduled_ns
    assert res.run.profile == "chat"
    summary = res.summary.to_dict()
    assert set(summary["turns"]) == {"0", "1", "2", "3"}
    assert all(v["count"] == 5 for v in summary["turns"].values())
    assert summary["shared_prefix"]["shared"]["count"] == 20
    assert summary["shared_prefix"]["unshared"]["count"] == 0


def test_stage_schedule_shapes_on_the_wire(tmp_path: Path, judgement: Judgement) -> None:
    prof = write(
        tmp_path / "stages.yaml",
        """
        name: stages
        classes: [{name: q, input_tokens: 8, output_tokens: 2}]
        arrival:
          mode: open
          process: constant
          stages:
            - {rate: 10, duration_s: 1}
            - {ramp_to: 30, duration_s: 1}
            - {burst: 15, at_s: 2.2}
        """,
    )
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        res = run_args(args_for(srv.url, profile=prof), tmp_path / "db.duckdb")
        arrivals = np.array(sorted(rel_arrivals_s(srv, res).values()))

    def count(a: float, b: float) -> int:
        return int(((arrivals >= a) & (arrivals < b)).sum())

    assert len(arrivals) == len(res.records) == 10 + 20 + 15
    # the schedule itself, exact whatever the machine's load
    assert sum(1 for r in res.records if r.scheduled_ns == 2_200_000_000) == 15
    assert res.run.settings["stages"][2] == {"burst": 15, "at_s": 2.2}
    # on the wire: a busy machine delays sends, so these are judged only where the load allows
    windows = [count(0.0, 1.0), count(1.0, 1.5), count(1.5, 2.0), count(2.0, 2.2), count(2.2, 2.4)]
    # constant 10/s; the ramp 10 → 30/s: 7.5 requests expected in its first half, 12.5 in its second; the burst: 15
    # requests scheduled at the same instant reach the server together (the window allows for 15 connections opened
    # at once, server and client sharing one process)
    on_time = windows[0] == 10 and 6 <= windows[1] <= 9 and 11 <= windows[2] <= 14 and windows[3:] == [0, 15]
    judgement.holds(on_time, f"arrivals per window {windows}, expected [10, 6–9, 11–14, 0, 15]")
    # the saturation check ran on the steady stage only and found nothing
    saturated = [w for w in res.summary.warnings if "OVER-SATURATED" in w]
    judgement.holds(not saturated, f"the steady stage was called over-saturated: {saturated}")


def test_replay_sends_at_the_trace_times(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    stamps = np.sort(rng.uniform(0, 2.0, 24))
    rows = [{"timestamp_s": float(t) + 100.0, "input_tokens": 12, "output_tokens": 3} for t in stamps]
    rows.append({"timestamp_s": 100.1, "input_tokens": 5, "output_tokens": 3, "session": "u1", "class": "chat"})
    rows.append({"timestamp_s": 100.2, "input_tokens": 5, "output_tokens": 3, "session": "u1", "class": "chat"})
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        res = run_args(args_for(srv.url, replay=trace, time_scale=0.5), tmp_path / "db.duckdb")
        arrived = rel_arrivals_s(srv, res)
    assert len(res.records) == 26
    errors = []
    for r in res.records:
        assert r.ok, r.error_detail
        if r.session_id is None:
            errors.append(arrived[r.server_request_id or ""] - r.scheduled_ns / 1e9)
    origin = min(float(stamps[0]), 0.1)  # times are relative to the trace's earliest row
    want = sorted((float(t) - origin) * 0.5 for t in stamps)
    got = sorted(r.scheduled_ns / 1e9 for r in res.records if r.session_id is None)
    assert got == pytest.approx(want, abs=1e-6)  # the schedule is the trace, scaled
    errs = np.array(errors) * 1000
    assert errs.min() >= 0
    # ms between the intended send and the server seeing the request (client and server share one busy process)
    assert np.median(errs) < 10, errs
    assert np.percentile(errs, 90) < 50, errs
    t0, t1 = sorted((r for r in res.records if r.session_id == "u1"), key=lambda r: r.turn or 0)
    assert t0.scheduled_ns == pytest.approx((0.1 - origin) * 0.5e9, abs=1e3)
    assert t1.input_tokens == 5 + 3 + 5  # turn 1 carries turn 0's prompt and response
    assert t1.scheduled_ns == pytest.approx((t0.end_ns or 0) + 0.05e9, abs=2e6)  # think time = scaled row gap
    assert res.run.profile == "replay:trace.jsonl"


@contextlib.contextmanager
def scripted_process(*flags: str) -> Iterator[str]:
    """The scripted server in its own process (no GIL shared with the client: steadier timing); yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope.testing.scripted_server", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the scripted server process did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_sweep_and_find_max_on_a_server_with_known_capacity(tmp_path: Path, judgement: Judgement) -> None:
    # 4 slots, each request takes 150 ms + 1 × 50 ms = 200 ms: at most 20 requests/s. Past it the queue grows by
    # (rate − 20)/20 s per s: at 22/s TTFT rises ~120 ms over a 1.2 s probe (the SLO or the saturation check fails
    # it); below it TTFT stays ~150 ms, 100 ms under the SLO, a margin for a busy test machine.
    capacity_rps = 4 / 0.200
    db = tmp_path / "db.duckdb"
    with scripted_process("--ttft-ms", "150", "--itl-ms", "50", "--capacity", "4") as url:
        base = args_for(
            url, db, output_tokens="2", arrival="constant", duration=1.2, requests=None, slo=("ttft_p90=250ms",)
        )

        def build(param: str, value: float) -> Any:
            r = resolve(_point(base, param, value))
            return r.config, r.specs, r.progress

        def build_closed(param: str, value: float) -> Any:
            r = resolve(_point(replace(base, duration=None, requests=16), param, value))
            return r.config, r.specs, r.progress

        def stored(cfg: BenchConfig, specs: Iterator[RequestSpec], progress: Progress) -> BenchResult:
            return execute(cfg, specs, progress, db)

        found = run_find_max(build, stored, start=16.0, max_rate=200.0, rel_tol=0.05)
        sweep = run_sweep(parse_sweep("concurrency=2,4,8"), build_closed, stored)
    r = found.result
    assert r is not None
    assert r.rate is not None
    assert r.upper is not None
    assert r.lower is not None
    assert r.lower <= r.upper
    # the knee, and 16 req/s inside the capacity: a busy machine's client lag moves both
    judgement.holds(abs(r.rate - capacity_rps) <= 0.1 * capacity_rps, f"the knee: {found.describe()}")
    judgement.holds(found.probes[0].passed, f"the first probe (16 req/s) failed: {found.describe()}")
    assert [p.passed for p in found.probes] == [probe_passed(p.result) for p in found.probes]
    assert any(not p.passed for p in found.probes)
    # every probe is a run in the store, linked by the sweep id
    store = RunStore(db)
    stored = [s for s in store.list_runs(limit=100) if s.run.sweep_id == found.sweep_id]
    assert len(stored) == len(found.probes)
    # closed-loop sweep: throughput stops growing at 4 in flight while latency doubles → the knee is at 4
    rows = sweep.to_dict()["points"]
    assert [p["load"] for p in rows] == [2, 4, 8]
    assert rows[1]["requests_per_s"] == pytest.approx(2 * rows[0]["requests_per_s"], rel=0.25)
    assert rows[2]["requests_per_s"] == pytest.approx(rows[1]["requests_per_s"], rel=0.2)
    assert sweep.knee == 1
    assert len({p["run_id"] for p in rows}) == 3
    assert {s.run.sweep_id for s in store.list_runs(limit=100) if s.run.id in {p["run_id"] for p in rows}} == {
        sweep.sweep_id
    }


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
        cwd=REPO,
    )


def test_example_profile_scaled_down_with_mixed_traffic_and_dialects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped support-chat profile, scaled down by CLI overrides, with its mixed traffic pointed at a live
    plain-HTTP endpoint (the scripted server's /metrics) and two dialects; then ``runs show --dialect``."""
    text = (REPO / "examples" / "support-chat.yaml").read_text()
    text = text.replace("# mixed_traffic:", "mixed_traffic:").replace(
        "#   - {name: profile_api", "  - {name: profile_api"
    )
    prof = tmp_path / "support-chat.yaml"
    out = tmp_path / "out.json"
    db = tmp_path / "db.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=1)) as srv:
        prof.write_text(text.replace("http://127.0.0.1:9000/profile", srv.url + "/metrics"))
        p = run_cli(
            "bench", "--url", srv.url, "--model", "scripted", "--profile", str(prof), "--duration", "2",
            "--rate", "8", "--output-tokens", "uniform:4:12", "--db", str(db), "--quiet", "--json", str(out),
            "--dialect", "vllm", "--dialect", "guidellm",
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
    shown = run_cli("runs", "show", "latest", "--dialect", "aiperf", "--db", str(db)).stdout
    shown_json = run_cli("runs", "show", "latest", "--dialect", "sglang", "--json", "-", "--db", str(db)).stdout
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert doc["run"]["profile"] == "support-chat"
    assert doc["run"]["settings"]["rate"] == 8.0
    assert set(doc["run"]["settings"]["overrides"]) >= {"duration", "rate", "output_tokens", "model"}
    scheduled = [r["scheduled_s"] for r in doc["requests"] if r["turn"] in (None, 0)]
    assert max(scheduled) < 2.0
    assert s["requests"]["total"] + s["requests"]["warmup"] == len(doc["requests"])
    # warmup.requests: 10 comes from the file (the first 10 specs; later session turns cut by the stop never ran)
    assert all(r["warmup"] == (r["id"] < 10) for r in doc["requests"])
    assert s["requests"]["warmup"] >= 5
    assert {"short", "conversation"} <= set(s["classes"])
    assert s["turns"]["0"]["count"] >= 1
    assert s["shared_prefix"]["shared"]["count"] >= 1
    mixed = s["mixed"]["profile_api"]
    assert mixed["failed"] == 0
    assert 30 <= mixed["ok"] <= 41  # 20 req/s for 2 s
    assert mixed["latency_ms"]["p50"] is not None
    assert set(s["dialects"]) == {"vllm", "guidellm"}
    assert s["dialects"]["vllm"]["dialect"] == "vllm"
    assert s["dialects"]["vllm"]["requests"]["completed"] == s["requests"]["completed"]
    assert "Mixed traffic" in p.stdout
    assert "As guidellm defines" in p.stdout
    assert "By session turn" in p.stdout
    assert "As aiperf defines" in shown
    assert "Inter Token" in shown  # the tool's own metric names label the rows
    assert json.loads(shown_json)["summary"]["dialect"] == "sglang"
    with pytest.raises(ConfigError, match="--dialect 'locust'"):
        show_run("latest", dialect="locust", store=db)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"profile": "BAD"}, "bad.yaml:2: classes[0].colour is not a known field"),
        ({"dialects": ("locust",), "requests": 2}, "--dialect 'locust'"),
        ({"sweep": "workers=1,2", "requests": 2}, "--sweep"),
        ({"find_max": True, "duration": 1.0}, "--find-max needs an SLO"),
        ({"replay": "TRACE", "rate": 3.0}, "--rate does not apply to --replay"),
        ({"profile": "BAD", "replay": "TRACE"}, "exclude each other"),
        ({"input_tokens": "100000000", "requests": 2}, "beyond any model's context"),
        ({"output_tokens": "1000000000000", "requests": 2}, "beyond any model's context"),
        ({"duration": 1e12}, "--duration"),
        ({"warmup": 10, "requests": 5}, "no request would be measured"),
        ({"replay": "LONGTRACE"}, "spans 11,574 days"),
        ({"timeout_total": 1e9, "requests": 2}, "--timeout-total"),
        ({"requests": 2, "workers": 0}, "--workers 0"),
    ],
)
def test_bad_workload_flags_fail_before_any_load(
    tmp_path: Path, flags: dict[str, Any], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nclasses: [{name: a, input_tokens: 5, output_tokens: 5, colour: red}]\narrival: {rate: 1}\n"
    )
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5}\n')
    long_trace = tmp_path / "long.jsonl"  # two requests 31 years apart
    long_trace.write_text(
        '{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5}\n'
        '{"timestamp_s": 1000000000, "input_tokens": 5, "output_tokens": 5}\n'
    )
    paths = {"BAD": bad, "TRACE": trace, "LONGTRACE": long_trace}
    kw = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in flags.items()}
    argv = ["bench", "--url", "http://127.0.0.1:9", "--db", str(tmp_path / "db"), "-q"]
    for k, v in kw.items():
        for item in v if isinstance(v, tuple) else (v,):
            flag = "--" + ("dialect" if k == "dialects" else k.replace("_", "-"))
            argv += [flag] if item is True else [flag, str(item)]
    # nothing listens on port 9: these must fail on the flags, before the target is contacted
    from tailscope.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code != 0
    err = capsys.readouterr().err
    assert needle in err, err
