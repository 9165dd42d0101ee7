"""Renderers: JUnit XML parsed back, markdown table, GitHub annotation lines, console text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gate_factory import lognormal_run

from tailscope.io.contracts import parse_contract
from tailscope.report.verify import gate_github, gate_junit, gate_markdown, gate_text
from tailscope.verify.evaluate import GateResult, evaluate

CONTRACT = """\
name: chat
slo:
  - {metric: ttft_ms, percentile: p99, max: 100000}
  - {metric: tpot_ms, percentile: p95, max: 1}
  - {metric: e2e_ms, percentile: p99, max: 10, class: missing_class}
regression:
  max_increase: {ttft_ms.p99: 10%}
"""


def _result(strict: bool = False) -> GateResult:
    base = lognormal_run("base", 120, seed=1)
    cand = lognormal_run("cand", 120, seed=2, ttft_median_ms=210.0)
    return evaluate(parse_contract(CONTRACT, "contract.yaml"), cand, baseline=base, strict=strict)


def test_junit_one_testcase_per_check() -> None:
    result = _result()
    root = ET.fromstring(gate_junit(result))  # noqa: S314 (our own output)
    assert root.tag == "testsuite"
    cases = root.findall("testcase")
    assert [c.get("name") for c in cases] == [c.name for c in result.checks]
    assert root.get("tests") == str(len(result.checks))
    by_name = {c.get("name"): c for c in cases}
    assert by_name["slo ttft_ms.p99"].find("failure") is None
    failure = by_name["slo tpot_ms.p95"].find("failure")
    assert failure is not None
    assert "limit ≤ 1.0 ms" in (failure.get("message") or "")
    assert by_name["slo e2e_ms.p99[missing_class]"].find("error") is not None
    assert by_name["regression ttft_ms.p99"].find("skipped") is not None  # inconclusive
    assert root.get("failures") == "1"
    assert root.get("errors") == "1"
    assert root.get("skipped") == "1"
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props == {"run": "cand", "baseline": "base"}


def test_junit_strict_turns_inconclusive_into_failure() -> None:
    root = ET.fromstring(gate_junit(_result(strict=True)))  # noqa: S314
    case = next(c for c in root.findall("testcase") if c.get("name") == "regression ttft_ms.p99")
    assert case.find("failure") is not None
    assert root.get("failures") == "2"


def test_markdown_and_text() -> None:
    result = _result()
    md = gate_markdown(result)
    assert md.startswith("### ❌ gate 'chat' on run cand vs baseline base: FAIL")
    assert md.count("\n| ") == len(result.checks) + 1
    assert "| ❌ | `slo tpot_ms.p95` |" in md
    text = gate_text(result)
    assert "FAIL: slo tpot_ms.p95: observed" in text
    assert "INCONCLUSIVE: regression ttft_ms.p99" in text
    assert text.rstrip().endswith("FAIL (1 pass, 1 fail, 1 inconclusive, 1 missing)")


def test_github_annotations() -> None:
    out = gate_github(_result(), contract_path="perf/contract.yaml").splitlines()
    assert out[0].startswith("::error file=perf/contract.yaml,line=4,title=slo tpot_ms.p95 fail::observed ")
    assert any(line.startswith("::warning file=perf/contract.yaml,line=5,title=slo e2e_ms.p99[missing_class]")
               for line in out)  # fmt: skip
    assert any(line.startswith("::warning file=perf/contract.yaml,line=7,title=regression ttft_ms.p99") for line in out)
    assert all("\n" not in line for line in out)


def test_compare_shows_cost_per_million_output_tokens_when_known() -> None:
    from tailscope.report.verify import compare_markdown, compare_text
    from tailscope.verify.compare import ComparisonResult

    cmp = ComparisonResult(("a", "b"), (), 0.95, 2000, (), (1.5, None))
    assert "$ per 1M output tokens: a 1.5000, b —" in compare_text(cmp)
    assert "$ per 1M output tokens: `a` 1.5000, `b` —." in compare_markdown(cmp)
    assert "$ per 1M" not in compare_text(ComparisonResult(("a", "b"), (), 0.95, 2000))
