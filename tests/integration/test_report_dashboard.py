"""`tailscope ui` over real loopback sockets and `tailscope report` end to end, on a store filled by real bench runs.

``report_store`` (also used by the browser tests) runs two benches against the scripted server — one sweep, two
concurrencies — and adds a run whose profile, model, class and tag are an XSS probe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tailscope.client.openai import Timeouts
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, Status, Target, TokensSource
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.loadgen import DispatchConfig
from tailscope.store.runs import RunStore
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.ui.dashboard import create_app
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests

pytestmark = pytest.mark.integration
XSS = "<script>alert(1)</script>"
MS = 1_000_000


def _bench(srv: ScriptedServer, db: Path, concurrency: int) -> str:
    cfg = BenchConfig(
        url=srv.url,
        model=None,
        dispatch=DispatchConfig(concurrency=concurrency),
        timeouts=Timeouts(connect_s=5, first_token_s=30, total_s=60),
        handle_signals=False,
        sweep_id="sweep-test",
        settings={"mode": "closed", "concurrency": concurrency, "rate": None},
        scrape_interval_s=0.2,
    )
    specs = simple_requests(LoadShape(concurrency=concurrency, requests=40), fixed(32), fixed(12), seed=1)
    # in a thread of its own: the browser tests' Playwright keeps an event loop running on the main thread
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(run_bench(cfg, specs, store=RunStore(db))).run.id).result(timeout=120)


def _xss_run(store: RunStore) -> str:
    rng = random.Random(3)
    records = []
    for i in range(60):
        sched = i * 20 * MS
        first = sched + int(rng.uniform(20, 60) * MS)
        times = tuple(first + k * 5 * MS for k in range(8))
        records.append(
            RequestRecord(
                id=i,
                scheduled_ns=sched,
                sent_ns=sched,
                first_token_ns=first,
                end_ns=times[-1],
                status=Status.OK,
                request_class=XSS if i % 2 else "chat",
                turn=i % 2,
                output_tokens=8,
                input_tokens=50,
                tokens_source=TokensSource.USAGE,
                chunk_times_ns=times,
                chunk_tokens=(1,) * 8,
            )
        )
    run = Run(
        id="20200101-000000-xss000",
        kind=RunKind.SIM,
        tool_version="0.1.0",
        started_at="2020-01-01T00:00:00Z",
        target=Target(url="sim://" + XSS, model=XSS),
        seed=1,
        settings={"note": XSS},
        profile=XSS,
    )
    store.create_run(run)
    store.write_records(run.id, records)
    store.finish_run(run.id, RunStatus.COMPLETE, summarize(records).to_dict())
    store.tag(run.id, XSS)
    return run.id


@pytest.fixture(scope="module")
def report_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with two real bench runs of one sweep and one XSS-probe run: ``{"db", "bench": [ids], "xss": id}``."""
    db = tmp_path_factory.mktemp("report-store") / "db.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=30, itl_ms=4)) as srv:
        ids = [_bench(srv, db, 2), _bench(srv, db, 8)]
    xss = _xss_run(RunStore(db))
    return {"db": db, "bench": ids, "xss": xss}


async def _with_client(app: Any, fn: Any) -> Any:
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        return await fn(client)


def run_async(app: Any, fn: Any) -> Any:
    return asyncio.run(_with_client(app, fn))


def test_lists_and_filters_runs(report_store: dict[str, Any]) -> None:
    app = create_app(report_store["db"])

    async def go(c: TestClient) -> None:
        r = await c.get("/")
        text = await r.text()
        assert r.status == 200
        for rid in [*report_store["bench"], report_store["xss"]]:
            assert f'data-run="{rid}"' in text
        assert XSS not in text
        r = await c.get("/", params={"kind": "sim"})
        text = await r.text()
        assert report_store["xss"] in text
        assert report_store["bench"][0] not in text
        r = await c.get("/", params={"tag": XSS})
        assert report_store["bench"][0] not in await r.text()
        r = await c.get("/", params={"q": report_store["bench"][1][-6:]})
        text = await r.text()
        assert report_store["bench"][1] in text
        assert report_store["bench"][0] not in text

    run_async(app, go)


def test_run_page_compare_page_and_export(report_store: dict[str, Any]) -> None:
    a, b = report_store["bench"]

    async def go(c: TestClient) -> None:
        r = await c.get(f"/runs/{a}")
        page = await r.text()
        assert r.status == 200
        assert 'id="percentiles"' in page
        r = await c.get(f"/runs/{a}/export.json")
        export = json.loads(await r.text())
        assert f'data-key="ttft_ms.p99" data-value="{export["summary"]["ttft_ms"]["p99"]}"' in page
        r = await c.get("/compare", params=[("run", a), ("run", b)])
        page = await r.text()
        assert r.status == 200
        assert 'id="cmp"' in page
        assert 'id="sweep"' in page
        r = await c.get("/compare", params={"run": a})
        assert r.status == 400
        r = await c.get("/sweeps/sweep-test")
        assert r.status == 200
        assert "concurrency=2 · " in await r.text()
        assert (await c.get("/sweeps/none")).status == 404
        r = await c.get("/runs/nope-does-not-exist")
        assert r.status == 404

    run_async(create_app(report_store["db"]), go)


def test_token_and_host_checks(report_store: dict[str, Any]) -> None:
    async def go(c: TestClient) -> None:
        assert (await c.get("/")).status == 401
        assert (await c.get("/", params={"token": "wrong"})).status == 401
        r = await c.get("/", params={"token": "s3cret"})
        assert r.status == 200
        assert "tailscope_token" in r.cookies
        assert (await c.get("/")).status == 200  # the cookie carries it now
        assert (await c.get("/", headers={"Host": "evil.example:80"})).status == 403

    run_async(create_app(report_store["db"], token="s3cret"), go)


def test_empty_store_says_how_to_start(tmp_path: Path) -> None:
    async def go(c: TestClient) -> None:
        r = await c.get("/")
        assert r.status == 200
        assert "tailscope bench" in await r.text()

    run_async(create_app(tmp_path / "none.duckdb"), go)


def test_report_cli_writes_run_compare_and_sweep(report_store: dict[str, Any], tmp_path: Path) -> None:
    from tailscope.cli.main import main

    a, b = report_store["bench"]
    db = str(report_store["db"])
    for args, marker in (
        ([a], 'id="percentiles"'),
        ([a, b, "--resamples", "200"], 'id="cmp"'),
        (["--sweep", "sweep-test", "--resamples", "200"], 'id="sweep"'),
    ):
        out = tmp_path / "r.html"
        with pytest.raises(SystemExit) as exc:
            main(["report", *args, "--out", str(out), "--db", db])
        assert exc.value.code == 0
        assert marker in out.read_text(encoding="utf-8")


def test_report_cli_errors_are_one_line(report_store: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from tailscope.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["report", "--out", "x.html", "--db", str(report_store["db"])])
    assert exc.value.code == 1
    assert "give run ids" in capsys.readouterr().err


def test_trace_set_pages(report_store: dict[str, Any], tmp_path: Path) -> None:
    from tailscope.store.db import Database
    from tailscope.store.spans import SpanStore
    from tailscope.trace.demo import demo_traces

    store = SpanStore(Database(report_store["db"]))
    for name, seed in (("dash-before", 1), ("dash-after", 2)):
        if name not in {s.name for s in store.list_sets()}:
            store.write(name, (s for t in demo_traces(40, seed=seed) for s in t), source=XSS)

    async def go(c: TestClient) -> None:
        r = await c.get("/")
        text = await r.text()
        assert 'href="/traces/dash-before"' in text
        assert XSS not in text
        r = await c.get("/traces/dash-before")
        page = await r.text()
        assert r.status == 200
        assert 'id="layer-shares"' in page
        assert 'data-key="traces.count" data-value="40"' in page
        assert (await c.get("/traces/no-such-set")).status == 404
        r = await c.get("/traces/dash-before", params={"after": "dash-after"})
        assert 'id="diff"' in await r.text()

    run_async(create_app(report_store["db"]), go)
    from tailscope.cli.main import main

    out = tmp_path / "diff.html"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "report",
                "--traces",
                "dash-before",
                "--traces",
                "dash-after",
                "--out",
                str(out),
                "--db",
                str(report_store["db"]),
            ]
        )
    assert exc.value.code == 0
    assert 'id="diff"' in out.read_text(encoding="utf-8")


def test_report_from_an_export_file_needs_no_store(report_store: dict[str, Any], tmp_path: Path) -> None:
    from tailscope.cli.main import main

    a = report_store["bench"][0]
    export, out = tmp_path / "a.json", tmp_path / "a.html"
    with pytest.raises(SystemExit) as exc:
        main(["runs", "export", a, "--out", str(export), "--db", str(report_store["db"])])
    assert exc.value.code == 0
    with pytest.raises(SystemExit) as exc:
        main(["report", str(export), "--out", str(out), "--db", str(tmp_path / "no-store.duckdb")])
    assert exc.value.code == 0
    doc = json.loads(export.read_text())
    page = out.read_text(encoding="utf-8")
    assert f'data-key="e2e_ms.p99" data-value="{doc["summary"]["e2e_ms"]["p99"]}"' in page
    assert a in page
