"""The method's pre-launch checklist (003 §5.1): each item evidenced, attested or missing, from crafted facts and from
a real store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from gate_factory import lognormal_run
from typer.testing import CliRunner

import tailscope
from tailscope.cli.main import app as main_app
from tailscope.io.contracts import contract_from_dict
from tailscope.metrics.summary import summarize
from tailscope.records import Run, RunKind, RunStatus, Target
from tailscope.store.runs import RunStore
from tailscope.verify.checklist import ITEM_IDS, ChecklistFacts, RunFacts, judge

CONTRACT = {
    "name": "chat",
    "slo": [
        {"metric": "ttft_ms", "percentile": "p99", "max": 2000},
        {"metric": "error_rate", "max": 0.01},
        {"metric": "requests_per_s", "min": 10},
    ],
    "layers": [{"layer": "retrieval", "percentile": "p99.9", "max_ms": 200}],
}


def summary(rps: float, *, failed: int = 0, ttft_p99: float = 500.0, server: bool = True, slo_ok: bool = True) -> Any:
    return {
        "requests": {"total": 100, "completed": 100 - failed, "failed": failed},
        "ttft_ms": {"p99": ttft_p99},
        "requests_per_s": rps,
        "slo": [{"slo": "ttft_p99", "passed": slo_ok}],
        "server": {"queue_depth": {"mean": 0.1, "max": 1}} if server else {},
    }


def facts(**kw: Any) -> ChecklistFacts:
    runs = [RunFacts(f"r{i}", "bench", "complete", summary=summary(12.5 + i)) for i in range(3)]
    base: dict[str, Any] = {
        "runs": runs,
        "trace_sets": ["prod"],
        "contract": contract_from_dict(CONTRACT, source="c.yaml"),
        "alert_rules": ["LlmP99High", "VectorP999High", "OomErrors", "Unavailable", "PromptRejections"],
        "alerts_path": "rules.yaml",
        "target_rps": 10.0,
        "attested": frozenset({"emergency_plan", "canary", "logging", "security", "compliance", "on_call"}),
    }
    base.update(kw)
    return ChecklistFacts(**base)


def _add(f: ChecklistFacts, run: RunFacts) -> ChecklistFacts:
    return replace(f, runs=[run, *f.runs])


def test_everything_evidenced_passes() -> None:
    result = judge(_add(facts(), RunFacts("d1", "bench", "complete", tags=("drill",), summary=summary(3.0, failed=40))))
    assert [i.id for i in result.items] == list(ITEM_IDS)
    assert len(result.items) == 12  # the method's "共12项"
    assert result.passed, result.to_dict()
    assert result.exit_code == 0
    assert result.item("capacity").status == "evidenced"
    assert "+45% headroom" in result.item("capacity").evidence  # 14.5 req/s vs 10
    assert result.item("emergency_plan").status == "attested"


def test_each_measurable_item_goes_missing_without_its_evidence() -> None:
    full = _add(facts(), RunFacts("d1", "bench", "complete", tags=("drill",), summary=summary(3.0, failed=40)))
    two = replace(full, runs=full.runs[:3])  # the drill and two baseline runs
    assert judge(two).item("baseline").status == "missing"
    slow = replace(
        full, runs=[*full.runs[:1], *(replace(r, summary=summary(12.5, ttft_p99=2500.0)) for r in full.runs[1:])]
    )
    assert "0 complete bench runs" in judge(slow).item("baseline").evidence
    assert judge(replace(full, contract=None)).item("contract").status == "missing"
    assert judge(replace(full, trace_sets=[])).item("instrumentation").status == "missing"
    assert judge(replace(full, alert_rules=None)).item("alerts").status == "missing"
    assert judge(replace(full, runs=full.runs[1:])).item("drill").status == "missing"
    failed_drill = _add(facts(), RunFacts("d2", "bench", "complete", tags=("drill",), summary=summary(3, slo_ok=False)))
    assert judge(failed_drill).item("drill").evidence == "1 drill runs, none passed"
    tight = judge(replace(full, target_rps=13.0))  # 14.5 / 13 = +12 % < 20 %
    assert tight.item("capacity").status == "missing"
    assert "+12% headroom (needs ≥ 20%)" in tight.item("capacity").evidence
    # no --target-rps: the contract's requests_per_s minimum (10) is the forecast
    assert judge(replace(full, target_rps=None)).item("capacity").status == "evidenced"
    unattested = judge(replace(full, attested=frozenset()))
    assert [i.id for i in unattested.missing] == ["emergency_plan", "canary", "logging", "security", "compliance",
                                                  "on_call"]  # fmt: skip
    assert unattested.exit_code == 1
    with pytest.raises(ValueError, match="unknown item"):
        judge(replace(full, attested=frozenset({"vibes"})))


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "ts.duckdb"
    rs = RunStore(db)
    for i in range(4):
        data = lognormal_run(f"base{i}", 300, seed=i, rate_rps=20.0)
        run = Run(id=f"base{i}", kind=RunKind.BENCH, tool_version="t", started_at=f"2026-01-0{i + 1}T00:00:00Z",
                  target=Target(url="http://127.0.0.1:1", model="m"), seed=0)  # fmt: skip
        rs.create_run(run)
        rs.write_records(run.id, list(data.records))
        doc = summarize(data.records).to_dict()
        doc["server"] = {"queue_depth": {"mean": 0.0, "max": 0.0}}
        rs.finish_run(run.id, RunStatus.COMPLETE, doc)
    rs.tag("base3", "drill")
    return db


def test_checklist_reads_the_store_and_the_files(tmp_path: Path) -> None:
    db = _store(tmp_path)
    contract = tmp_path / "contract.yaml"
    contract.write_text(json.dumps(CONTRACT))
    rules = tmp_path / "rules.yaml"
    rules.write_text(tailscope.alerts(contract).to_yaml())
    result = tailscope.checklist(contract=contract, alerts=rules, target_rps=15.0, store=db)
    assert result.item("baseline").status == "evidenced"
    assert result.item("contract").status == "evidenced"
    assert result.item("alerts").status == "evidenced"
    assert result.item("drill").status == "evidenced"
    assert result.item("capacity").status == "evidenced"  # ≈ 20 req/s vs 15
    assert result.item("instrumentation").status == "missing"  # no trace set in the store
    assert result.exit_code == 1
    out = CliRunner().invoke(
        main_app,
        ["checklist", "--contract", str(contract), "--alerts", str(rules), "--target-rps", "15", "--db", str(db),
         "--attest", "instrumentation", *[a for i in ("emergency_plan", "canary", "logging", "security",
                                                      "compliance", "on_call") for a in ("--attest", i)]],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "ready to launch" in out.output
    bad = CliRunner().invoke(main_app, ["checklist", "--db", str(db), "--json", "-"])
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert "contract" in doc["missing"]
    assert {i["id"]: i["status"] for i in doc["items"]}["baseline"] == "evidenced"  # own verdicts, errors ≤ 1 %
