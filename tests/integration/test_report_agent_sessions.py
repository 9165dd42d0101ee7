"""The session metrics of an agent run in its HTML report and in ``runs show``, against the built-in engine over
loopback HTTP (21 calls: three whole sessions of seven).

The report's Sessions section shows the run's own ``summary.sessions`` (complete/failed/incomplete, duration and
time per step, steps per session, the per-step table by name in the agent's order); the run has no "conversation
turn" table (its turns are call indexes). A run stored without a summary (killed) gets the same session structure
rebuilt from its stored records, in ``runs show`` and in its report. Plain HTML parse; robust properties only: no
timing is judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_agent_steps_store import PROFILE, SEED, _structure  # three whole sessions of the agent call graph

import tailscope
from tailscope.records import RunStatus
from tailscope.report.html import fmt_num
from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.store.runs import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
STEP_CALLS = {"plan": 3, "search": 9, "answer": 3, "check/think": 6}


class Page(HTMLParser):
    """The section ids of a page and the text of every ``data-key`` cell inside the Sessions section."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.cells: dict[str, str] = {}
        self.step_rows: list[str] = []
        self._section: str | None = None
        self._key: str | None = None
        self._th = False
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self._section = a.get("id")
            self.sections.append(str(a.get("id")))
        if tag == "table":
            self._table = a.get("id")
        if self._section == "sessions" and "data-key" in a:
            self._key = str(a["data-key"])
            self.cells[self._key] = ""
        self._th = tag == "th" and self._table == "sessions-by-step"

    def handle_data(self, data: str) -> None:
        if self._key is not None:
            self.cells[self._key] += data
        if self._th and data.strip():
            self.step_rows.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._key = None
        if tag == "th":
            self._th = False
        if tag == "section":
            self._section = None


def _page(html: str) -> Page:
    p = Page()
    p.feed(html)
    return p


def test_agent_run_report_and_runs_show_give_the_session_metrics(tmp_path: Path) -> None:
    profile = tmp_path / "agent.yaml"
    profile.write_text(PROFILE)
    db = tmp_path / "s.duckdb"
    engine, options = build_replica("llama-3.1-8b", "h100-sxm")
    with EmbeddedServer(engine, options) as srv:
        res = tailscope.bench(srv.base_url, profile=profile, metrics_url="off", seed=SEED, store=db)
    assert all(r.ok for r in res.records)
    sessions = json.loads(res.to_json())["summary"]["sessions"]
    assert _structure(sessions)["by_step"] == STEP_CALLS

    page = _page(tailscope.report_html(res.run.id, store=db))
    assert "sessions" in page.sections
    assert "per-turn" not in page.sections  # an agent's turn is its call index, not a conversation turn
    assert page.step_rows[:5] == ["step", "calls", "p50", "p99", "max"]
    assert page.step_rows[5:] == list(STEP_CALLS)  # the agent's order
    cells = {k: v.strip() for k, v in page.cells.items()}
    assert cells["sessions.sessions"] == "3"
    assert cells["sessions.complete"] == "3"
    assert (cells["sessions.failed"], cells["sessions.incomplete"]) == ("0", "0")
    assert cells["sessions.steps.mean"] == fmt_num(7.0)
    for key in ("duration_ms.p50", "duration_ms.p99", "step_ms.p50", "step_ms.p99"):
        part, stat = key.split(".")
        assert cells[f"sessions.{key}"] == fmt_num(sessions[part][stat])
    for name, calls in STEP_CALLS.items():
        assert cells[f"sessions.by_step.{name}.count"] == str(calls)
        assert cells[f"sessions.by_step.{name}.p99"] == fmt_num(sessions["by_step"][name]["p99"])

    # the run as a killed one leaves it: records stored, no summary
    RunStore(db).finish_run(res.run.id, RunStatus.INCOMPLETE, None)
    shown = tailscope.show_run(res.run.id, store=db).summary
    assert _structure(shown["sessions"]) == _structure(sessions)
    rebuilt = _page(tailscope.report_html(res.run.id, store=db))
    assert rebuilt.step_rows[5:] == list(STEP_CALLS)
    assert "per-turn" not in rebuilt.sections
    env = {**os.environ, "TAILSCOPE_DB": str(db), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "tailscope", "runs", "show", res.run.id], capture_output=True,
                          text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sessions 3  failed 0" in proc.stdout
    assert "Agent steps" in proc.stdout
    assert "check/think" in proc.stdout
