"""Console tables that say what they mean (issue 28 item 4): ``runs list`` shows each run's target (host:port and
model, or the built-in engine), its workload and its kind; a find-max probe's verdict carries its reason."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from tailscope.records import Run, RunKind, RunStatus, Target
from tailscope.report.runs_console import runs_table
from tailscope.report.sweep_console import points_table
from tailscope.store.runs import StoredRun


def _stored(run_id: str, target: Target, settings: dict[str, Any], kind: RunKind = RunKind.BENCH,
            profile: str | None = None) -> StoredRun:  # fmt: skip
    run = Run(run_id, kind, "0", "2026-12-03T02:00:00Z", target, 0, settings, profile, RunStatus.COMPLETE)
    return StoredRun(run, None, {"output_tokens_per_s": 1234.0}, ("main",), {})


def _text(renderable: Any) -> str:
    con = Console(width=200, record=True)
    con.print(renderable)
    return con.export_text()


def test_runs_list_tells_targets_workloads_and_kinds_apart() -> None:
    out = _text(
        runs_table([
            _stored("r-a", Target("http://10.0.0.1:8000", "qwen3"), {"mode": "closed", "concurrency": 16}),
            _stored("r-b", Target("http://10.0.0.2:8000", "qwen3"), {"mode": "open", "rate": 8}),
            _stored("r-c", Target("http://127.0.0.1:1", "llama-3.1-8b", builtin=True), {}, profile="support-chat"),
            _stored("r-d", Target("sim://x", "llama-3.1-8b"), {}, kind=RunKind.SIM),
        ])
    )  # fmt: skip
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("r-")}
    assert "10.0.0.1:8000 qwen3" in rows["r-a"]
    assert "c=16" in rows["r-a"]
    assert "10.0.0.2:8000 qwen3" in rows["r-b"]
    assert "8/s" in rows["r-b"]
    assert "built-in llama-3.1-8b" in rows["r-c"]
    assert "support-chat" in rows["r-c"]
    assert " sim " in rows["r-d"]
    assert " bench " in rows["r-a"]
    assert "1,234" in rows["r-a"]  # numbers whole, never cut


def test_find_max_probes_say_why_they_failed() -> None:
    point = {"param": "rate", "load": 8.0, "completed": 10, "failed": 0, "requests_per_s": 8.0,
             "output_tokens_per_s": 100.0, "goodput_rps": 8.0, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0,
             "tpot_p99_ms": 5.0, "e2e_p99_ms": 100.0}  # fmt: skip
    out = _text(points_table([
        {**point, "passed": True},
        {**point, "load": 16.0, "passed": False, "reason": "saturated: the server queue grew"},
    ], title="find-max", verdicts=True))  # fmt: skip
    assert "pass" in out
    assert "fail saturated: the server queue grew" in out  # not a bare "fail" for a probe whose SLOs held


def test_twin_check_says_how_the_servers_steady_decode_compared() -> None:
    from tailscope.report.twin_console import print_twin_check

    row = {"metric": "tpot_ms", "percentile": "p50", "predicted": 5.0, "low": 4.8, "high": 5.2, "measured": 6.2,
           "error": -0.19, "gated": True, "within": True}  # fmt: skip
    steady = {
        "ratio": 1.23,
        "by_streams": {
            "1": {"measured_ms": 5.51, "predicted_ms": 4.54, "measured_gaps": 900, "predicted_gaps": 400},
            "2": {"measured_ms": 6.36, "predicted_ms": None, "measured_gaps": 30, "predicted_gaps": 0},
        },
    }
    result = {"rows": [row], "passed": True, "tolerance": 0.25, "steady_decode": steady}
    con = Console(width=200, record=True)
    print_twin_check(con, result)
    out = con.export_text()
    assert "steady decode" in out
    assert "×1.23 (1 stream 5.51 / 4.54 ms)" in out  # a batch size the twin never ran is not listed
    assert "drift (try --anchor) or the fit" in " ".join(out.split())  # ×1.23: outside the band, no anchor
    con = Console(width=200, record=True)
    print_twin_check(con, {**result, "steady_decode": {**steady, "ratio": 1.05}})
    assert "×1.05" in con.export_text()
    assert "drift" not in con.export_text()
    con = Console(width=200, record=True)
    print_twin_check(con, {**result, "steady_decode": {"ratio": None, "by_streams": {}}})
    assert "steady decode" not in con.export_text()
