"""``tailscope runs trend`` on a real store: simulated runs tagged main, a slower GPU from the fifth run on; the TPOT
step is marked at that run in the table, the JSON and the HTML page (issue 24 item 6, the method's weekly review)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tailscope

pytestmark = pytest.mark.integration


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def test_trend_marks_the_step_of_a_slower_gpu(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    ids = []
    for i in range(8):
        gpu = "h100-sxm" if i < 4 else "a100-80gb"
        r = tailscope.simulate(gpu=gpu, rate=4, requests=150, seed=i, store=db)
        ids.append(r.run.id)
        tailscope.tag_run(r.run.id, "main", store=db)
    tailscope.simulate(rate=4, requests=50, store=db)  # untagged: not on the main trend
    trend = tailscope.runs_trend(tag="main", store=db)
    assert [p.run_id for p in trend.points] == ids
    tpot = [c for c in trend.change_points if c.series == "tpot_ms.p50"]
    assert [c.run_id for c in tpot] == [ids[4]]
    assert tpot[0].after > tpot[0].before
    assert len(trend.daily) >= 1
    assert sum(d.runs for d in trend.daily) == 8
    p = cli("runs", "trend", "--tag", "main", "--db", str(db), "--json", "out.json", "--html", "trend.html",
            cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert ids[4] in p.stdout
    assert "change points" in p.stdout
    doc = json.loads((tmp_path / "out.json").read_text())
    assert len(doc["runs"]) == 8
    assert any(c["series"] == "tpot_ms.p50" and c["run_id"] == ids[4] for c in doc["change_points"])
    page = (tmp_path / "trend.html").read_text()
    assert "<svg" in page
    assert "stroke-dasharray" in page  # the change point's marker
    bad = cli("runs", "trend", "--since", "last tuesday", "--db", str(db), cwd=tmp_path)
    assert bad.returncode != 0
    assert "--since" in bad.stderr
    recent = cli("runs", "trend", "--since", "1d", "--tag", "main", "--db", str(db), "--json", "-", cwd=tmp_path)
    assert len(json.loads(recent.stdout)["runs"]) == 8
