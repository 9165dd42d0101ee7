"""tailscope.report_html / write_report: the library prepares what the page shows (summary, diagnosis, comparison,
sweep knee) from any run reference; the dashboard's reads go through it and never open a file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tailscope
from tailscope.api.report import run_index, stored_item, sweep_run_ids
from tailscope.records import RunStatus
from tailscope.store.runs import RunStore


def store_runs(tmp_path: Path, docs: list[dict[str, Any]], **tags: str) -> Path:
    db = tmp_path / "ts.duckdb"
    rs = RunStore(db)
    for doc in docs:
        rs.create_run(doc["run_obj"])
        rs.write_records(doc["run_obj"].id, doc["records"])
        rs.finish_run(doc["run_obj"].id, RunStatus.COMPLETE, doc["summary"])
    for run_id, tag in tags.items():
        rs.tag(run_id, tag)
    return db


def test_one_run_from_an_export_has_its_diagnosis(synthetic: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    doc = synthetic()
    export = tmp_path / "run.json"
    export.write_text(json.dumps({k: doc[k] for k in ("run", "summary", "requests")}))
    html = tailscope.report_html(export)
    assert 'id="findings"' in html  # the diagnosis, prepared by the library (an export carries no findings)
    assert f'data-key="e2e_ms.p99" data-value="{doc["summary"]["e2e_ms"]["p99"]}"' in html
    out = tailscope.write_report(tmp_path / "sub" / "r.html", export)
    assert out.read_text(encoding="utf-8") != ""


def test_exactly_one_subject_and_a_sane_resample_count(synthetic: Callable[..., dict[str, Any]]) -> None:
    with pytest.raises(tailscope.ConfigError, match="give run ids, or --sweep"):
        tailscope.report_html()
    with pytest.raises(tailscope.ConfigError, match="give run ids, or --sweep"):
        tailscope.report_html(["a"], sweep="s")
    with pytest.raises(tailscope.ConfigError, match="--resamples"):
        tailscope.report_html(["a", "b"], resamples=5)
    with pytest.raises(tailscope.ConfigError, match=r"one set .* or two"):
        tailscope.report_html(traces=["a", "b", "c"])


def test_an_unreadable_export_is_a_plain_config_error(tmp_path: Path) -> None:
    """A report input that cannot be read exits 1 (a gate's exits 2): the report's own exit code is kept."""
    missing = tmp_path / "missing.json"
    with pytest.raises(tailscope.ConfigError, match="cannot read the export") as exc:
        tailscope.report_html(missing)
    assert type(exc.value) is tailscope.ConfigError


def test_stored_comparison_and_sweep(synthetic: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    a = synthetic(n=80, run_id="20260101-000000-aaaaaa")
    b = synthetic(n=80, run_id="20260101-000001-bbbbbb", slow=2.0)
    db = store_runs(tmp_path, [a, b], **{"20260101-000000-aaaaaa": "main"})
    html = tailscope.report_html(["latest:main", "20260101-000001"], store=db, resamples=100)
    assert 'id="cmp"' in html
    assert "sig worse" in html
    with pytest.raises(tailscope.ConfigError, match=r"--sweep 'nope': found 0 runs"):
        tailscope.report_html(sweep="nope", store=db)
    assert sweep_run_ids("nope", store=db) == []


def test_the_dashboards_reads_go_through_the_library(synthetic: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    a = synthetic(n=40, run_id="20260101-000000-aaaaaa")
    db = store_runs(tmp_path, [a], **{"20260101-000000-aaaaaa": "main"})
    index = run_index(store=db, text="MAIN")
    assert [s.run.id for s in index.runs] == ["20260101-000000-aaaaaa"]
    assert index.exists
    assert run_index(store=db, text="no-such-text").runs == ()
    assert stored_item("latest", store=db).findings
    export = tmp_path / "a.json"
    export.write_text(json.dumps({k: a[k] for k in ("run", "summary", "requests")}))
    with pytest.raises(tailscope.NotFoundError):
        stored_item(str(export), store=db)  # the dashboard never reads a file named in a URL
    empty = run_index(store=tmp_path / "none.duckdb")
    assert not empty.exists
    assert empty.runs == ()
    assert not (tmp_path / "none.duckdb").exists()
