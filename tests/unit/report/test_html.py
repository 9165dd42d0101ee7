"""The HTML report: the numbers are the export's numbers, user text is inert, the page is self-contained and small."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.api._pages import sweep_points, with_findings
from tailscope.api.report import compare_html
from tailscope.errors import ConfigError
from tailscope.report.html import (
    ReportRun,
    fmt_num,
    lookup,
    render_compare_page,
    render_run_report,
    write_html,
)

XSS = "<script>alert(1)</script>"


class Cells(HTMLParser):
    """Collects every element carrying data-key: (key, data-value, shown text, run index)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self.script_data: str = ""
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "data-key" in a:
            self._open = {"key": a["data-key"], "value": a.get("data-value"), "run": a.get("data-run"), "text": ""}
        if tag == "script" and a.get("id") == "ts-data":
            self._in_data = True

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data
        if self._in_data:
            self.script_data += data

    def handle_endtag(self, tag: str) -> None:
        if self._open is not None and tag in ("td", "div"):
            self.cells.append(self._open)
            self._open = None
        if tag == "script":
            self._in_data = False


def parse(html: str) -> Cells:
    p = Cells()
    p.feed(html)
    return p


def item(doc: dict[str, Any], tags: tuple[str, ...] = ()) -> ReportRun:
    """A run as the library prepares it for its page (findings and per-turn summaries included)."""
    return with_findings(ReportRun(doc["run"], doc["summary"], doc["records"], doc["samples"], tags))


def test_every_number_shown_is_the_export_number(synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic()
    export = json.loads(json.dumps(doc["summary"], allow_nan=False))  # what --json writes
    cells = parse(render_run_report(item(doc))).cells
    keyed = [c for c in cells if c["value"] is not None]
    assert len(keyed) > 60
    for c in keyed:
        expected = lookup(export, c["key"])
        if c["value"] == "null":
            assert expected is None, c
        else:
            assert float(c["value"]) == pytest.approx(expected, rel=1e-12), c
        assert c["text"].strip() == fmt_num(expected), c
    shown = {c["key"] for c in keyed}
    assert {"ttft_ms.p99", "e2e_ms.p999", "itl_ms.p50", "output_tokens_per_s", "requests.failed"} <= shown


def test_embedded_chart_data_carries_the_same_summary(synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic()
    data = json.loads(parse(render_run_report(item(doc))).script_data)
    assert data["runs"][0]["summary"] == json.loads(json.dumps(doc["summary"]))
    assert data["runs"][0]["charts"]["ttft_ms"]["n"] == doc["summary"]["ttft_ms"]["count"]
    assert data["runs"][0]["charts"]["ttft_ms"]["cdf"]["x"][-1] == pytest.approx(doc["summary"]["ttft_ms"]["max"])


def test_user_text_is_escaped_everywhere(synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic()
    html = render_run_report(item(doc, (XSS,)))
    assert XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text (profile, model, class, tag)
    data_block = html.split('id="ts-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data_block
    assert json.loads(data_block)["runs"][0]["label"].endswith(f"({XSS})")


def test_page_is_self_contained(synthetic: Callable[..., dict[str, Any]]) -> None:
    html = render_run_report(item(synthetic(n=50)))
    assert re.search(r"<(script|img|iframe)[^>]*\ssrc=", html) is None
    assert "<link" not in html
    assert "connect-src 'none'" in html
    nonce = re.search(r"'nonce-([^']+)'", html)
    assert nonce is not None
    assert html.count(f'nonce="{nonce.group(1)}"') == 2  # plotly and the report script, nothing else runs
    assert "window.Plotly" in html


def test_ten_thousand_requests_stay_under_five_megabytes(synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic(n=10_000)
    html = render_run_report(item(doc))
    size = len(html.encode("utf-8"))
    assert size < 5_000_000, size
    data = json.loads(parse(html).script_data)
    assert data["runs"][0]["gantt"]["total"] == 10_000
    assert data["runs"][0]["gantt"]["shown"] <= 300
    # statistics are never sampled: the table shows the full-population count
    assert f'data-key="itl_ms.count" data-value="{doc["summary"]["itl_ms"]["count"]}"' in html


def test_per_class_and_per_turn_breakdowns(synthetic: Callable[..., dict[str, Any]]) -> None:
    html = render_run_report(item(synthetic()))
    assert 'id="per-class"' in html
    assert 'id="per-turn"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</th>" in html  # the class name, escaped


def test_comparison_marks_significant_differences(synthetic: Callable[..., dict[str, Any]]) -> None:
    a = synthetic(run_id="run-a")
    b = synthetic(run_id="run-b", slow=2.0)
    html = compare_html([item(a), item(b)], resamples=200)
    assert 'id="cmp"' in html
    assert 'data-significant="true"' in html
    assert "sig worse" in html  # b is twice as slow: TTFT got worse, significantly
    cells = [c for c in parse(html).cells if c["run"] is not None]
    for c in cells:
        src = a if c["run"] == "0" else b
        assert c["text"].strip() == fmt_num(lookup(src["summary"], c["key"])), c


def test_comparison_without_records_says_so(synthetic: Callable[..., dict[str, Any]]) -> None:
    a, b = synthetic(run_id="run-a"), synthetic(run_id="run-b")
    html = compare_html([ReportRun(a["run"], a["summary"]), ReportRun(b["run"], b["summary"])])
    assert 'id="no-significance"' in html


def test_comparison_needs_two_runs(synthetic: Callable[..., dict[str, Any]]) -> None:
    with pytest.raises(ConfigError, match="at least two"):
        render_compare_page([item(synthetic())])


def test_sweep_points_and_knee(synthetic: Callable[..., dict[str, Any]]) -> None:
    items = []
    for conc, tput, p99 in ((1, 100.0, 50.0), (2, 200.0, 52.0), (4, 390.0, 60.0), (8, 400.0, 200.0)):
        doc = synthetic(n=20, run_id=f"r{conc}", concurrency=conc)
        run = {**doc["run"], "sweep_id": "sw1"}
        summary = {**doc["summary"], "requests_per_s": tput, "e2e_ms": {**doc["summary"]["e2e_ms"], "p50": p99}}
        items.append(ReportRun(run, summary, doc["records"]))
    sw = sweep_points(list(reversed(items)))
    assert sw is not None
    assert sw["param"] == "concurrency"
    assert [p["load"] for p in sw["points"]] == [1.0, 2.0, 4.0, 8.0]
    assert sw["knee"] == 2  # 4 → 8 adds 2.6 % requests/s for +233 % E2E p50: the console's knee, the same definition
    assert sw["slo"][0]["threshold_ms"] == 200.0
    html = compare_html(items, resamples=100)
    assert 'id="sweep"' in html


def test_no_sweep_without_a_shared_id(synthetic: Callable[..., dict[str, Any]]) -> None:
    assert sweep_points([item(synthetic(run_id="a")), item(synthetic(run_id="b"))]) is None


def test_write_html(tmp_path: Path, synthetic: Callable[..., dict[str, Any]]) -> None:
    """The page of a prepared run has its diagnosis; write_html creates the folder."""
    doc = synthetic(n=30)
    out = write_html(tmp_path / "sub" / "r.html", render_run_report(item(doc)))
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert 'id="findings"' in page
    assert 'id="cmp"' in compare_html([item(doc), item(synthetic(run_id="b", slow=2.0))], resamples=100)


def test_write_html_names_an_unwritable_path(tmp_path: Path, synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic(n=5)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot write"):
        write_html(tmp_path / "file" / "r.html", render_run_report(item(doc)))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),
        (12345.6, "12,346"),
        (123.45, "123.5"),
        (1.234, "1.23"),
        (0.01234, "0.012"),
        (7, "7"),
        (float("inf"), "∞"),
        (float("nan"), "—"),
        (True, "True"),
    ],
)
def test_fmt_num(value: Any, shown: str) -> None:
    assert fmt_num(value) == shown


def test_sim_runs_show_the_simulation_and_its_timeline(synthetic: Callable[..., dict[str, Any]]) -> None:
    doc = synthetic(n=40)
    sim = {
        "virtual_s": 2.0,
        "wall_s": 0.1,
        "speedup": 20.0,
        "steps": 99,
        "preemptions": 0,
        "prefix_hit_rate": None,
        "timeline": [{"t_s": 1.0, "replicas_ready": 1}],
        "scale_events": [[1.5, 1, f"why {XSS}"]],
    }
    html = render_run_report(ReportRun(doc["run"], {**doc["summary"], "sim": sim}, doc["records"]))
    assert 'id="scale-events"' in html
    assert XSS not in html
    data = json.loads(parse(html).script_data)
    assert data["runs"][0]["series"]["server"][0]["name"] == "sim:replicas_ready"


def test_runs_without_successes_still_render(synthetic: Callable[..., dict[str, Any]]) -> None:
    from tailscope.metrics.summary import summarize
    from tailscope.records import ErrorClass, RequestRecord, Status

    doc = synthetic(n=5)
    failed = [
        RequestRecord(
            id=i,
            scheduled_ns=i * 10**7,
            sent_ns=i * 10**7,
            first_token_ns=None,
            end_ns=i * 10**7 + 10**6,
            status=Status.ERROR,
            error=ErrorClass.CONNECT,
        )
        for i in range(20)
    ]
    empty = ReportRun(doc["run"], summarize([]).to_dict(), [])
    all_failed = ReportRun(doc["run"], summarize(failed).to_dict(), failed)
    for it in (empty, all_failed):
        data = json.loads(parse(render_run_report(it)).script_data)
        assert data["runs"][0]["charts"]["ttft_ms"]["n"] == 0
    html = compare_html([empty, all_failed])
    assert 'id="no-significance"' in html
    assert "connect" in render_run_report(all_failed)


@settings(max_examples=15, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_user_text_round_trips_as_text(text: str) -> None:
    from tailscope.metrics.summary import summarize
    from tailscope.records import RequestRecord, Status

    recs = [
        RequestRecord(
            id=i,
            scheduled_ns=i * 10**6,
            sent_ns=i * 10**6,
            first_token_ns=i * 10**6 + 5 * 10**6,
            end_ns=i * 10**6 + 9 * 10**6,
            status=Status.OK,
            request_class=text,
            chunk_times_ns=(i * 10**6 + 5 * 10**6, i * 10**6 + 9 * 10**6),
            chunk_tokens=(1, 1),
        )
        for i in range(3)
    ]
    run = {"id": "r", "kind": "bench", "status": "complete", "profile": text, "target": {"url": text, "model": text}}
    html = render_run_report(ReportRun(run, summarize(recs).to_dict(), recs))

    class Profile(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.inside = False
            self.value = ""
            self.scripts = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.scripts += tag == "script"
            self.inside = dict(attrs).get("data-field") == "run.profile"

        def handle_data(self, data: str) -> None:
            if self.inside:
                self.value += data

        def handle_endtag(self, tag: str) -> None:
            self.inside = False

    p = Profile()
    body, _, tail = html.partition('<script type="application/json"')
    p.feed(body)  # the page up to the data block: no script may have been opened there
    assert p.scripts == 0
    assert len(re.findall(r"<script[\s>]", tail)) == 2  # plotly and the report's own, after the data block
    assert p.value == text.replace("\r\n", "\n").replace("\r", "\n") or p.value.strip() == text.strip()
    data = json.loads(html.split('id="ts-data">', 1)[1].split("</script>", 1)[0])
    assert data["runs"][0]["summary"]["requests"]["completed"] == 3


def test_run_report_shows_the_diagnosis(synthetic: Callable[..., dict[str, Any]]) -> None:
    html = render_run_report(item(synthetic()))  # TTFT climbs while the server queue is non-empty
    assert 'id="findings"' in html
    assert "Saturation" in html


def test_renderers_draw_only_what_they_are_given(synthetic: Callable[..., dict[str, Any]]) -> None:
    """No diagnosis, comparison or knee-finding inside the renderer: an unprepared model shows none of them."""
    doc = synthetic()
    bare = ReportRun(doc["run"], doc["summary"], doc["records"], doc["samples"])
    html = render_run_report(bare)
    assert 'id="findings"' not in html
    assert 'id="per-turn"' not in html
    other = ReportRun({**doc["run"], "id": "other"}, doc["summary"], doc["records"], doc["samples"])
    page = render_compare_page([bare, other])
    assert 'id="cmp"' not in page
    assert 'id="no-significance"' in page


def test_agent_runs_show_their_sessions_by_step_and_no_turn_table(synthetic: Callable[..., dict[str, Any]]) -> None:
    """An agent run: the session metrics and the per-step table, named as stored; its ``turn`` is only the call's
    index in its session, so no "conversation turn" table."""
    from dataclasses import replace

    from tailscope.metrics.sessions import session_summary

    doc = synthetic()
    names = ("plan", XSS, "answer")
    records = [replace(r, step=names[r.turn or 0], depends_on=(r.id - 1,) if r.turn else ()) for r in doc["records"]]
    sessions = session_summary(records)
    assert sessions is not None
    summary = {**doc["summary"], "sessions": sessions}
    html = render_run_report(with_findings(ReportRun(doc["run"], summary, records, doc["samples"])))
    assert 'id="sessions"' in html
    assert 'id="per-turn"' not in html
    cells = {c["key"]: c["text"].strip() for c in parse(html).cells if c["key"].startswith("sessions.")}
    assert cells["sessions.sessions"] == fmt_num(sessions["sessions"])
    assert cells["sessions.failed"] == fmt_num(sessions["failed"])
    complete = sessions["sessions"] - sessions["failed"] - sessions["incomplete"]
    assert cells["sessions.complete"] == fmt_num(complete)
    assert cells["sessions.duration_ms.p99"] == fmt_num(sessions["duration_ms"]["p99"])
    for name, stats in sessions["by_step"].items():
        assert cells[f"sessions.by_step.{name}.count"] == fmt_num(stats["count"])
        assert cells[f"sessions.by_step.{name}.p50"] == fmt_num(stats["p50"])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</th>" in html  # the step name, escaped
    assert XSS not in html.split('id="sessions"')[1].split("</section>")[0]


def test_a_run_without_a_summary_gets_its_sessions_from_its_records(
    synthetic: Callable[..., dict[str, Any]],
) -> None:
    """A killed run (no stored summary): its page rebuilds the session metrics from the records' session ids and
    steps, against trace → load's plan when the settings hold one (a planned session never started: incomplete)."""
    from dataclasses import replace

    from tailscope.api._pages import run_item
    from tailscope.verify.rundata import RunData

    doc = synthetic()
    records = tuple(replace(r, step=f"s{r.turn}", depends_on=(r.id - 1,) if r.turn else ()) for r in doc["records"])
    sids = {r.session_id for r in records if not r.warmup}
    planned = {str(s): 3 for s in sids} | {"never-started": 2}
    data = RunData(id="r", kind="bench", records=records, settings={"trace_load": {"planned": planned}})
    s = run_item(data).summary["sessions"]
    assert s["sessions"] == len(sids) + 1
    assert s["incomplete"] >= 1
    assert set(s["by_step"]) == {"s0", "s1", "s2"}
    html = render_run_report(run_item(data))
    assert 'id="sessions-by-step"' in html
    assert 'id="per-turn"' not in html
