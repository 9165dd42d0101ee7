"""``tailscope drill`` against the reference application over loopback (issue 25's "Done when", at a reduced time
scale): the engine down for a while under 4 req/s passes with the fallback (errors ≤ 1 %) and fails (exit 1) with
``--no-fallback``; the drill is stored as a run tagged ``drill`` whose report shows the fault window.

The app runs at ``time_scale=0.1`` with all fixes (P95 ≈ 0.16 s); the drill is 8 s with the engine down from 2 s to
4 s. The functional judgements (error rate, exit codes, fallback counters, stored run) always run; the latency and
recovery judgements only on a machine not busier than its cores.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.report.drill import drill_junit, drill_markdown, drill_text

pytestmark = pytest.mark.integration

SCALE = 0.1


def _busy() -> bool:
    return os.getloadavg()[0] > (os.cpu_count() or 1)


@contextmanager
def app_in_thread(**kwargs: Any) -> Iterator[str]:
    """The reference app served from its own event loop in a thread; yields its URL."""
    loop = asyncio.new_event_loop()
    server = tailscope.start_app(time_scale=SCALE, fixes="all", seed=1, **kwargs)
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with server:
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(60), "the app did not start"
    try:
        yield server.url
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def drill_doc(url: str, timing: bool) -> dict[str, Any]:
    expect: dict[str, Any] = {"error_rate_max": 0.01, "fallback_min": 1}
    if timing:
        expect |= {"e2e_p95_max_ms": 1500, "recovered_within_s": 2}
    return {
        "name": "llm-down",
        "target": {"url": url},
        "load": {"rate": 4, "duration_s": 8, "output_tokens": 16},
        "fault": {"at_s": 2, "for_s": 2, "kind": "llm-down"},
        "expect": expect,
    }


def test_llm_down_passes_with_the_fallback_and_is_stored_with_its_timeline(tmp_path: Path) -> None:
    timing = not _busy()
    db = tmp_path / "t.duckdb"
    with app_in_thread() as url:
        result = tailscope.drill(drill_doc(url, timing), store=db, seed=2, timing=timing)
    print(drill_text(result.to_dict()))
    assert result.passed, drill_text(result.to_dict())
    assert result.exit_code == 0
    assert result.whole.requests >= 20
    assert result.during.requests >= 4
    assert result.whole.error_rate <= 0.01
    # a request reaches the model ~0.1 s after it is sent: the edges of the window may fall either side
    assert result.fallbacks is not None
    assert result.fallbacks >= max(1, result.during.requests // 2)
    events = [e.event for e in result.timeline]
    assert events[0] == "fault-start"
    assert "fault-end" in events
    assert "fallback-engaged" in events
    start = next(e.t_s for e in result.timeline if e.event == "fault-start")
    assert abs(start - 2.0) < 0.5
    if timing:
        assert result.recovery_s is not None
    # stored as a run tagged drill, the drill in its summary; the report shows the fault window
    view = tailscope.show_run("latest:drill", store=db)
    assert view is not None
    out = tmp_path / "r.html"
    tailscope.write_report(out, "latest:drill", store=db)
    html = out.read_text(encoding="utf-8")
    assert 'id="drill-timeline"' in html
    assert "fault-start" in html
    assert "fallback-engaged" in html
    junit = drill_junit(result.to_dict())
    assert 'failures="0"' in junit
    assert 'name="error_rate_max"' in junit
    assert "✅ passed" in drill_markdown(result.to_dict())


def test_llm_down_without_fallback_fails_with_exit_1(tmp_path: Path) -> None:
    drill_file = tmp_path / "llm-down.yaml"
    drill_file.write_text(
        "name: llm-down\n"
        "target: {url: 'http://127.0.0.1:1'}\n"
        "load: {rate: 4, duration_s: 8, output_tokens: 16}\n"
        "fault: {at_s: 2, for_s: 2, kind: llm-down}\n"
        "expect: {error_rate_max: 0.01}\n",
        encoding="utf-8",
    )
    junit, md = tmp_path / "d.xml", tmp_path / "d.md"
    env = {**os.environ, "TAILSCOPE_DB": str(tmp_path / "t.duckdb")}
    with app_in_thread(fallback=False) as url:
        out = subprocess.run(
            [sys.executable, "-m", "tailscope", "drill", str(drill_file), "--url", url, "--junit", str(junit),
             "--markdown", str(md)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL  error_rate_max" in out.stdout
    assert "drill FAILED" in out.stdout
    assert 'failures="1"' in junit.read_text(encoding="utf-8")
    assert "❌ failed" in md.read_text(encoding="utf-8")
    during = next(line for line in out.stdout.splitlines() if line.strip().startswith("during"))
    assert "0.0%" not in during  # the engine's failures are errors while it is down


def test_bad_drill_file_and_unreachable_target_exit_2_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntarget: {url: 'http://127.0.0.1:1'}\nload: {rate: 4, duration_s: 8}\n"
                   "fault: {at_s: 2, for_s: 2, kind: llm-gone}\n", encoding="utf-8")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "tailscope", "drill", str(bad), "--no-store"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert f"{bad}:4: fault kind must be one of" in out.stderr
    good = tmp_path / "good.yaml"
    good.write_text(bad.read_text(encoding="utf-8").replace("llm-gone", "llm-down"), encoding="utf-8")
    argv = [sys.executable, "-m", "tailscope", "drill", str(good), "--no-store"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "/admin/state does not answer" in out.stderr


def test_a_target_already_degraded_is_refused_before_any_load() -> None:
    async def main() -> None:
        async with tailscope.start_app(time_scale=SCALE, fixes="all") as app:
            app.set_fault("db-slow")
            with pytest.raises(tailscope.TargetError, match=r"not healthy before the drill \(faults db-slow on\)"):
                await tailscope.drill_async(drill_doc(app.url, timing=False))
            assert app.stats.requests == 0

    asyncio.run(main())
