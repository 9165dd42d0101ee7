"""``tailscope trace`` end to end: demo files → ingest → analyze → show --json → diff, in a temporary store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def ts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=180)


def test_demo_ingest_analyze_show_diff(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    demo = tmp_path / "demo"
    r = ts("trace", "demo", "--out", str(demo), "--traces", "300")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "01"')
    r = ts("trace", "ingest", str(demo / "before.otlp.json"), str(bad), "--set", "before", "--db", db)
    assert r.returncode == 0, r.stderr
    assert "loaded" in r.stdout
    assert f"{bad}:1:" in r.stderr  # file and position of the damage
    r = ts("trace", "ingest", str(demo / "after.otlp.json"), "--set", "after", "--db", db)
    assert r.returncode == 0, r.stderr

    out = tmp_path / "a.json"
    r = ts("trace", "analyze", "--set", "before", "--db", db, "--json", str(out), "--root-op", "POST /chat")
    assert r.returncode == 0, r.stderr
    assert "waterfall:" in r.stdout
    result = json.loads(out.read_text())
    assert result["traces"]["count"] == 300
    top = result["waterfalls"][0]
    assert top["pattern"].startswith("invoke_agent support → execute_tool search_kb")
    assert 0.5 < top["traces"] / 300 < 0.75  # generated sequential in 63 % of traces

    r = ts("trace", "analyze", "--set", "before", "--db", db, "--policy", "jaeger", "--json", str(out))
    assert r.returncode == 0, r.stderr

    import duckdb

    con = duckdb.connect(db, read_only=True)
    try:
        trace_id = con.execute("SELECT trace_id FROM spans WHERE set_name = 'before' LIMIT 1").fetchone()[0]
    finally:
        con.close()
    r = ts("trace", "show", trace_id[:12], "--set", "before", "--db", db, "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"trace_id", "spans", "critical_path", "exclusive_ns"}
    assert set(doc["spans"][0]) == {"span_id", "parent_id", "name", "start_ns", "end_ns", "layer"}
    assert set(doc["critical_path"][0]) == {"span_id", "name", "start_ns", "end_ns"}
    root = next(s for s in doc["spans"] if s["parent_id"] is None)
    assert sum(doc["exclusive_ns"].values()) == root["end_ns"] - root["start_ns"]
    r = ts("trace", "show", trace_id[:12], "--db", db)
    assert r.returncode == 0, r.stderr
    assert "critical path" in r.stdout

    d = tmp_path / "d.json"
    r = ts("trace", "diff", "--before", "before", "--after", "after", "--db", db, "--json", str(d))
    assert r.returncode == 0, r.stderr
    diff = json.loads(d.read_text())
    assert "POST /chat" in diff["root_ops"]
    assert diff["root_ops"]["POST /chat"]["explanations"]

    r = ts("trace", "analyze", "--set", "nope", "--db", db)
    assert r.returncode == 1
    assert "no trace set 'nope'" in r.stderr
    r = ts("trace", "analyze", "--set", "before", "--db", db, "--policy", "zipkin")
    assert r.returncode == 1
    assert "--policy" in r.stderr


def test_trace_sets_lists_and_trace_delete_removes(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    demo = tmp_path / "demo"
    assert ts("trace", "demo", "--out", str(demo), "--traces", "50").returncode == 0
    for name in ("before", "after"):
        r = ts("trace", "ingest", str(demo / f"{name}.otlp.json"), "--set", name, "--db", db)
        assert r.returncode == 0, r.stderr
    r = ts("trace", "sets", "--db", db)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}
    assert set(rows) == {"before", "after"}
    assert rows["before"][2] == "50"  # traces
    assert int(rows["before"][1].replace(",", "")) > 50  # spans
    r = ts("trace", "delete", "before", "nope", "--db", db)
    assert r.returncode == 1
    assert "no trace set 'nope'" in r.stderr
    assert "before" in ts("trace", "sets", "--db", db).stdout  # nothing deleted when one name is wrong
    r = ts("trace", "delete", "before", "--db", db)
    assert r.returncode == 0, r.stderr
    assert "deleted 'before'" in r.stdout
    r = ts("trace", "sets", "--db", db)
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["after"]


def test_ingest_that_loads_no_span_fails_with_one_line_naming_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {"spans": [{"traceId": "ab", "spanId": "cd", "startTimeUnixNano": 1, "endTimeUnixNano": 2}]}
                        ]
                    }
                ]
            }
        )
    )
    cases = {
        "empty.json": (b"", "empty file"),
        "blob.bin": (bytes(range(256)) * 4, "not a protobuf ExportTraceServiceRequest"),
        "notes.txt": (b"hello, these are notes\n", "text that is not JSON"),
        "cut.json": (good.read_bytes()[:40], "truncated JSON"),
        "none.json": (b'{"resourceSpans": []}', "no span in this file"),
    }
    db = str(tmp_path / "s.duckdb")
    for name, (data, why) in cases.items():
        bad = tmp_path / name
        bad.write_bytes(data)
        r = ts("trace", "ingest", str(bad), "--set", "x", "--db", db)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, (name, r.stderr)
        assert str(bad) in lines[0]
        assert why in lines[0]
        assert "expected OTLP JSON" in lines[0]
        assert "Traceback" not in r.stderr
    r = ts("trace", "ingest", str(good), str(tmp_path / "none.json"), "--set", "x", "--db", db)
    assert r.returncode == 0, r.stderr  # beside a file with spans, a file without is a warning
    assert "(1 spans, 1 traces in the set)" in r.stdout  # the failed ingests created no set
    assert f"warning: {tmp_path / 'none.json'}: no span in this file" in r.stderr
