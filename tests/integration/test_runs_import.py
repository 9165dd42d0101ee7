"""``tailscope runs import`` through the real CLI and a DuckDB store: vLLM bench, GuideLLM and AIPerf results become
runs that ``runs show``, ``compare``, ``gate``, ``diagnose`` and ``report`` read; ``--json`` is the bench document.

The vLLM case also runs vLLM's own benchmark client against the built-in engine on 127.0.0.1 when the vLLM venv is
there (``tests/fixtures/peers/make_vllm_result.sh``; no vLLM server is started); otherwise the committed file that
script wrote is used.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "peers"


def cli(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAILSCOPE_DB": str(db), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=timeout, env=env,
        check=False,
    )  # fmt: skip


def _import(path: Path, tool: str, db: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{tool}.json"
    proc = cli("runs", "import", str(path), "--from", tool, "--tag", tool, "--json", str(out), db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _assert_vllm_figures(result: Path, db: Path, tmp_path: Path) -> None:
    own = json.loads(result.read_text())
    doc = _import(result, "vllm", db, tmp_path)
    assert doc["run"]["kind"] == "import"
    assert len(doc["requests"]) == own["num_prompts"]
    assert doc["run"]["settings"]["import"]["tool"] == "vllm"
    show = cli("runs", "show", "latest:vllm", "--dialect", "vllm", "--json", "-", db=db)
    assert show.returncode == 0, show.stderr
    view = json.loads(show.stdout)["summary"]
    assert view["requests"]["completed"] == own["completed"]
    for ours, theirs in (("ttft_ms", "ttft"), ("itl_ms", "itl")):
        for stat, key in (("median", f"median_{theirs}_ms"), ("p99", f"p99_{theirs}_ms")):
            assert view["metrics"][ours][stat] == pytest.approx(own[key], rel=0.01), (ours, stat)


def test_imported_runs_work_with_show_compare_gate_diagnose_report(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    _assert_vllm_figures(FIX / "vllm_bench_serve.json", db, tmp_path)
    _import(FIX / "aiperf" / "profile_export.jsonl", "aiperf", db, tmp_path)
    guide = _import(FIX / "guidellm_benchmarks.json", "guidellm", db, tmp_path)
    assert guide["run"]["target"]["url"] == "http://127.0.0.1:8000"

    shown = cli("runs", "show", "latest:vllm", db=db)
    assert shown.returncode == 0
    assert "imported from vllm bench serve" in shown.stdout
    assert "TTFT is timed from the send" in shown.stdout
    listed = cli("runs", "list", "--kind", "import", "--json", "-", db=db)
    assert listed.returncode == 0
    assert len(json.loads(listed.stdout)) == 3

    compared = cli("compare", "latest:vllm", "latest:aiperf", "--json", "-", db=db)
    assert compared.returncode == 0, compared.stderr
    assert "ttft_ms" in compared.stdout

    contract = tmp_path / "contract.yaml"
    contract.write_text("name: imported\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 100000}\n")
    gated = cli("gate", str(contract), "--run", "latest:guidellm", db=db)
    assert gated.returncode == 0, gated.stdout + gated.stderr

    diagnosed = cli("diagnose", "latest:aiperf", "--json", "-", db=db)
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "findings" in json.loads(diagnosed.stdout)

    html = tmp_path / "r.html"
    reported = cli("report", "latest:vllm", "latest:guidellm", "--out", str(html), db=db)
    assert reported.returncode == 0, reported.stderr
    assert html.stat().st_size > 10_000


def test_bad_file_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "profile_export.jsonl"
    bad.write_text('{"metadata": {"request_start_ns": 1}, "metrics": {}}\nnot json\n')
    proc = cli("runs", "import", str(bad), "--from", "aiperf", db=tmp_path / "s.duckdb")
    assert proc.returncode == 2
    assert f"{bad}:2: invalid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_result_written_by_vllms_own_client_imports_with_its_figures(
    tmp_path: Path, vllm_python: Path, tiny_model_dir: Path
) -> None:
    """vLLM's own benchmark client against the built-in engine on loopback, then imported.

    Skips without vLLM like every real-vLLM test (the ``vllm_python`` fixture), and fails instead under CI."""
    py = vllm_python
    tokenizer = tiny_model_dir
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = tmp_path / "vllm.json"
    bindir = Path(sys.executable).parent
    env = {**os.environ, "OUT_FILE": str(result), "PORT": str(port), "PATH": f"{bindir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(FIX / "make_vllm_result.sh"), str(py.parent.parent), str(tokenizer)],
        capture_output=True, text=True, timeout=400, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _assert_vllm_figures(result, tmp_path / "store.duckdb", tmp_path)


def test_translate_cli_writes_a_profile_bench_accepts(tmp_path: Path) -> None:
    """`translate --out` writes a profile that `bench --profile` runs (against the built-in engine, 6 requests)."""
    db = tmp_path / "s.duckdb"
    out = tmp_path / "p.yaml"
    proc = cli(
        "translate", "--from", "vllm", "--out", str(out), "--",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--dataset-name", "random",
        "--random-input-len", "32", "--random-output-len", "8", "--random-range-ratio", "0.5",
        "--request-rate", "20", "--num-prompts", "6", "--ignore-eos", "--save-result", db=db,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout
    assert "semantic differences:" in proc.stdout
    assert "--save-result: output or display only" in proc.stdout
    ran = cli("bench", "--profile", str(out), "--quiet", db=db, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = json.loads(cli("runs", "list", "--json", "-", db=db).stdout)
    assert listed[0]["requests"]["total"] == 6
    refused = cli("translate", "--from", "aiperf", "--", "--input-file", "x.jsonl", "--osl", "4", db=db)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("tailscope: error: aiperf --input-file: cannot be")
