"""``tailscope trace whatif`` end to end: a generated OTLP file → ingest → whatif (changes, --json, --rank), and a
bad change flag answered in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trace"))


def ts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=180)


def test_whatif_cli(tmp_path: Path) -> None:
    from whatif_truth import trace_sets

    from tailscope.trace.demo import to_otlp_json

    before, _ = trace_sets(300, "")
    src = tmp_path / "case.otlp.json"
    src.write_text(json.dumps(to_otlp_json([s for t in before for s in t])))
    db = str(tmp_path / "s.duckdb")
    r = ts("trace", "ingest", str(src), "--set", "case", "--db", db)
    assert r.returncode == 0, r.stderr

    out = tmp_path / "w.json"
    r = ts("trace", "whatif", "--set", "case", "--db", db, "--set-duration", "auth=30ms",
           "--parallel", "search_a,search_b,search_c", "--json", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "after" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["traces"] == 300
    assert {"p50_ms", "p95_ms", "p99_ms"} <= set(doc["before"])
    assert doc["after"]["p95_ms"] < doc["before"]["p95_ms"]
    assert [c["kind"] for c in doc["changes"]] == ["set-duration", "parallel"]

    r = ts("trace", "whatif", "--set", "case", "--db", db, "--rank", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "ranked fixes" in r.stdout
    cands = json.loads(out.read_text())["candidates"]
    par = [c for c in cands if c["kind"] == "parallelise"]
    assert par
    assert all("rerank" not in c["operations"] for c in par)

    # the file directly, nothing stored
    r = ts("trace", "whatif", "--set", str(src), "--remove", "memory fetch")
    assert r.returncode == 0, r.stderr

    r = ts("trace", "whatif", "--set", "case", "--db", db, "--cache", "search_b=40%")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--cache" in lines[0]
    assert "OP=0.4:2ms" in lines[0]

    r = ts("trace", "cacheability", "--set", "case", "--db", db, "--ttl", "search_a=30d", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "cacheability" in r.stdout
    doc = json.loads(out.read_text())
    assert {"operations", "candidates"} <= set(doc)
    row = next(o for o in doc["operations"] if o["operation"] == "search_a")
    assert row["immutability"] > 20
    r = ts("trace", "cacheability", "--set", "case", "--db", db, "--change-rate", "search_a=often")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1
    assert "--change-rate" in r.stderr
    # an operation no span is named: bad input, one line with the flag, the name and the close names
    r = ts("trace", "cacheability", "--set", "case", "--db", db, "--ttl", "serch_a=30d", "--json", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert '--ttl "serch_a=30d"' in lines[0]
    assert "'serch_a'" in lines[0]
    assert "did you mean 'search_a'" in lines[0]

    html = tmp_path / "w.html"
    r = ts("trace", "whatif", "--set", "case", "--db", db, "--scale", "llm answer=0.5", "--html", str(html))
    assert r.returncode == 0, r.stderr
    assert "<svg" in html.read_text()


def test_whatif_cli_by_class(tmp_path: Path) -> None:
    from test_trace_whatif_classes import classed_traces

    from tailscope.trace.demo import to_otlp_json

    src = tmp_path / "classes.otlp.json"
    src.write_text(json.dumps(to_otlp_json([s for t in classed_traces() for s in t])))
    db = str(tmp_path / "s.duckdb")
    assert ts("trace", "ingest", str(src), "--set", "c", "--db", db).returncode == 0

    out = tmp_path / "w.json"
    html = tmp_path / "w.html"
    r = ts("trace", "whatif", "--set", "c", "--db", db, "--scale", "search=0.2", "--json", str(out),
           "--html", str(html))  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["class_attribute"] == "tailscope.request.class"
    chat, rag = doc["classes"]["chat"], doc["classes"]["rag"]
    assert chat["after"]["p95_ms"] == chat["before"]["p95_ms"]
    assert rag["after"]["p95_ms"] < rag["before"]["p95_low_ms"]
    assert 'id="classes"' in html.read_text()

    r = ts("trace", "whatif", "--set", "c", "--db", db, "--scale", "search=0.2")
    assert r.returncode == 0, r.stderr
    assert "by class (tailscope.request.class)" in r.stdout
    assert "rag (200)" in r.stdout

    r = ts("trace", "whatif", "--set", "c", "--db", db, "--scale", "search=0.2", "--class-attribute", "",
           "--json", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "classes" not in json.loads(out.read_text())


def test_whatif_cli_unknown_operations(tmp_path: Path) -> None:
    """A change naming an operation the set lacks is warned about (close names); none matching at all is bad input:
    one line, exit 2, nothing projected."""
    from whatif_truth import trace_sets

    from tailscope.trace.demo import to_otlp_json

    before, _ = trace_sets(60, "")
    src = tmp_path / "case.otlp.json"
    src.write_text(json.dumps(to_otlp_json([s for t in before for s in t])))
    db = str(tmp_path / "s.duckdb")
    assert ts("trace", "ingest", str(src), "--set", "case", "--db", db).returncode == 0

    out = tmp_path / "w.json"
    r = ts("trace", "whatif", "--set", "case", "--db", db, "--set-duration", "auth=30ms", "--scale", "serch_a=0.5")
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stdout
    assert "did you mean 'search_a'" in r.stdout
    r = ts("trace", "whatif", "--set", "case", "--db", db, "--set-duration", "auth=30ms", "--scale", "serch_a=0.5",
           "--json", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [u["operation"] for u in doc["unmatched"]] == ["serch_a"]
    assert "search_a" in doc["unmatched"][0]["close"]
    assert any("serch_a" in w for w in doc["warnings"])

    for source in ("case", str(src)):
        r = ts("trace", "whatif", "--set", source, "--db", db, "--scale", "serch_a=0.5", "--remove", "nothing_here")
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert '--scale "serch_a=0.5"' in lines[0]
        assert "did you mean 'search_a'" in lines[0]
        assert "--remove" in lines[0]
        assert "tailscope trace analyze" in lines[0]
        assert r.stdout == ""


def test_whatif_cli_unknown_root_op_and_independent(tmp_path: Path) -> None:
    """--root-op and --independent names are checked like the changes': a name of no span is bad input (one line,
    close names, exit 2, nothing projected) when it leaves nothing to act on; an --independent group that still
    pairs two operations only warns."""
    from whatif_truth import trace_sets

    from tailscope.trace.demo import to_otlp_json

    before, _ = trace_sets(60, "")
    src = tmp_path / "case.otlp.json"
    src.write_text(json.dumps(to_otlp_json([s for t in before for s in t])))
    roots = {s.name for t in before for s in t if s.parent_id is None}
    root = sorted(roots)[0]
    db = str(tmp_path / "s.duckdb")
    assert ts("trace", "ingest", str(src), "--set", "case", "--db", db).returncode == 0
    change = ("--parallel", "search_a,search_b")
    for source in ("case", str(src)):
        for extra, expect in (
            (("--root-op", root.swapcase()), f"did you mean {root!r}"),
            (("--independent", "serch_a,serch_b"), "no --independent group names two operations"),
            (("--root-op", "search_a"), f"roots of the set: {root!r}"),
        ):
            r = ts("trace", "whatif", "--set", source, "--db", db, *change, *extra)
            assert r.returncode == 2, r.stdout + r.stderr
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1, r.stderr
            assert expect in lines[0]
            assert r.stdout == ""
    out = tmp_path / "w.json"
    r = ts("trace", "whatif", "--set", "case", "--db", db, *change, "--independent", "search_a,search_b,serch_c",
           "--root-op", root, "--json", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [u["operation"] for u in doc["unmatched"]] == ["serch_c"]
    assert any("serch_c" in w and "no pair with it is declared independent" in w for w in doc["warnings"])
    r = ts("trace", "whatif", "--set", "case", "--db", db, *change, "--independent", "search_a,search_b,serch_c")
    assert r.returncode == 0, r.stderr
    assert "serch_c" in r.stdout
