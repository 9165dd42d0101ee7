"""Alert and recording rules, and the Grafana dashboard, generated from a contract (structure; promtool runs in the
integration tests)."""

from __future__ import annotations

import json

import yaml

from tailscope.io.contracts import parse_contract
from tailscope.verify.alerts import AlertOptions, alert_rules
from tailscope.verify.diagnose import CHECKLISTS
from tailscope.verify.grafana import dashboard

CONTRACT = parse_contract(
    """\
name: chat-service
slo:
  - {metric: ttft_ms, percentile: p99, max: 1500}
  - {metric: tpot_ms, percentile: p95, max: 50}
  - {metric: e2e_ms, percentile: p99, max: 20000, class: long_context}
  - {metric: itl_ms, percentile: p99.9, max: 200}
  - {metric: e2e_ms, percentile: mean, max: 9000}
  - {metric: error_rate, max: 0.01}
  - {metric: goodput_rps, min: 5}
""",
    "c.yaml",
)


def test_rule_file_shape_and_thresholds() -> None:
    rules = alert_rules(CONTRACT, AlertOptions(for_="2m", window="1m", selector='job="vllm"'))
    doc = yaml.safe_load(rules.to_yaml())
    assert [g["name"] for g in doc["groups"]] == ["tailscope-chat_service-recording", "tailscope-chat_service-alerts"]
    recs = {r["record"]: r["expr"] for r in doc["groups"][0]["rules"]}
    assert recs["tailscope:ttft_seconds:p99"] == (
        'histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[1m])))'
    )
    assert "vllm:e2e_request_latency_seconds_bucket" in recs["tailscope:e2e_seconds:p99"]
    assert "histogram_quantile(0.999," in recs["tailscope:itl_seconds:p999"]
    assert recs["tailscope:kv_cache_usage"] == 'max(vllm:kv_cache_usage_perc{job="vllm"})'
    assert 'status=~"5..|5xx",' not in recs["tailscope:error_ratio"]
    assert 'job="vllm",status=~"5..|5xx"' in recs["tailscope:error_ratio"]
    alerts = {r["alert"]: r for r in doc["groups"][1]["rules"]}
    sel = '{contract="chat-service"}'
    assert alerts["ChatServiceTTFTP99SloBreach"]["expr"] == f"tailscope:ttft_seconds:p99{sel} > 1.5"
    assert alerts["ChatServiceTPOTP95SloBreach"]["expr"] == f"tailscope:tpot_seconds:p95{sel} > 0.05"
    assert alerts["ChatServiceITLP999SloBreach"]["expr"] == f"tailscope:itl_seconds:p999{sel} > 0.2"
    assert alerts["ChatServiceErrorRatioSloBreach"]["expr"] == f"tailscope:error_ratio{sel} > 0.01"
    assert alerts["ChatServiceGoodputRpsLow"]["expr"] == f"tailscope:requests_per_s{sel} < 5"
    assert all(r["labels"] == {"contract": "chat-service"} for r in doc["groups"][0]["rules"])
    for name in ("RequestsQueueing", "BacklogGrowing", "KvCacheNearFull", "Preemptions", "EngineDown"):
        assert f"ChatService{name}" in alerts
    # the admitted backlog: diagnose's thresholds (≥ 8 more running, median TTFT ×1.5), TTFT against the hour's low
    backlog = alerts["ChatServiceBacklogGrowing"]["expr"]
    assert f"delta(tailscope:requests_running{sel}[1m]) >= 8" in backlog
    assert f"tailscope:ttft_seconds:p50{sel} >= 1.5 * min_over_time(tailscope:ttft_seconds:p50{sel}[1h])" in backlog
    for rule in alerts.values():
        assert rule["for"] == "2m"
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["labels"]["contract"] == "chat-service"
        assert rule["annotations"]["runbook"].startswith("1. ")
        assert rule["annotations"]["summary"]
    assert alerts["ChatServiceTTFTP99SloBreach"]["annotations"]["runbook"].count("\n") == len(CHECKLISTS["ttft"]) - 1
    assert alerts["ChatServiceTTFTP99SloBreach"]["labels"]["severity"] == "critical"
    assert alerts["ChatServiceKvCacheNearFull"]["labels"]["severity"] == "warning"
    assert len(rules.skipped) == 2
    assert rules.skipped[0].startswith("e2e_ms.p99[long_context]: engine metrics carry no request class")
    assert rules.skipped[1].startswith("e2e_ms.mean:")


def test_every_alert_uses_a_recorded_series_or_a_raw_metric() -> None:
    rules = alert_rules(CONTRACT)
    recorded = set(rules.record_names)
    for group in rules.document["groups"][1:]:
        for r in group["rules"]:
            expr = r["expr"].replace("(", " ").replace("[", " ").replace("{", " ")
            names = {tok for tok in expr.split() if tok.startswith("tailscope:")}
            assert names <= recorded, r["alert"]


def test_grafana_dashboard() -> None:
    dash = json.loads(json.dumps(dashboard(CONTRACT)))
    assert dash["schemaVersion"] == 39
    titles = [p["title"] for p in dash["panels"]]
    assert titles[:4] == ["TTFT quantiles", "E2E quantiles", "TPOT quantiles", "ITL quantiles"]
    recorded = set(alert_rules(CONTRACT).record_names)
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for t in panel["targets"]:
            record, _, sel = t["expr"].partition("{")
            assert record in recorded
            assert sel == 'contract="chat-service"}'
    ttft = dash["panels"][0]
    steps = ttft["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": 1.5}
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_golden_alerts_are_the_methods_five() -> None:
    # ../shared/method/003 §4.3: the five golden alerts, each with its own duration, severity and checklist
    from tailscope.api.verify import alerts as make_alerts

    rules = make_alerts(golden=True)
    doc = yaml.safe_load(rules.to_yaml())
    alerts = {r["alert"]: r for r in doc["groups"][1]["rules"]}
    want = {
        "GoldenLlmP99LatencyHigh": ("2m", "page", "> 1.2"),
        "GoldenVectorSearchP999High": ("1m", "warning", "> 0.2"),
        "GoldenLlmOutOfMemory": ("0s", "page", "> 0"),
        "GoldenServiceUnavailable": ("30s", "page", "> 0.01"),
        "GoldenPromptRejectionRateHigh": ("1m", "warning", "> 0.05"),
    }
    assert set(alerts) == set(want)
    for name, (for_, severity, limit) in want.items():
        assert alerts[name]["for"] == for_
        assert alerts[name]["labels"]["severity"] == severity
        assert alerts[name]["expr"].endswith(limit)
        assert alerts[name]["annotations"]["runbook"].startswith("1. ")
    assert "histogram_quantile(0.99," in alerts["GoldenLlmP99LatencyHigh"]["expr"]
    assert (
        "histogram_quantile(0.999, sum by (le) (rate(vector_search_duration_seconds_bucket"
        in (alerts["GoldenVectorSearchP999High"]["expr"])
    )
    assert "increase(llm_out_of_memory_errors_total" in alerts["GoldenLlmOutOfMemory"]["expr"]
    runbook = alerts["GoldenLlmP99LatencyHigh"]["annotations"]["runbook"]
    assert "GPU memory usage > 95 %" in runbook
    assert "< 5 tokens/s" in runbook
    assert "crawlers" in runbook
    # with a contract, the golden alerts come on top of the contract's own
    both = alert_rules(CONTRACT, AlertOptions(), golden=True)
    assert "ChatServiceLlmP99LatencyHigh" in both.alert_names
    assert "ChatServiceTTFTP99SloBreach" in both.alert_names


def test_per_slo_for_and_severity_and_layers_never_vanish() -> None:
    contract = parse_contract(
        """\
name: rag
slo:
  - {metric: e2e_ms, percentile: p99, max: 1200, for: 2m, severity: page}
  - {metric: ttft_ms, percentile: p99, max: 1500}
layers:
  - {layer: retrieval, percentile: p99.9, max_ms: 200, for: 1m}
  - {layer: gateway, percentile: p99, max_ms: 50}
""",
        "c.yaml",
    )
    assert contract.slos[0].alert_for == "2m"
    assert contract.slos[0].severity == "page"
    rules = alert_rules(contract, AlertOptions(for_="5m", layer_metrics=(("retrieval", "vector_search_seconds"),)))
    alerts = {r["alert"]: r for r in rules.document["groups"][1]["rules"]}
    assert alerts["RagE2EP99SloBreach"]["for"] == "2m"
    assert alerts["RagE2EP99SloBreach"]["labels"]["severity"] == "page"
    assert alerts["RagTTFTP99SloBreach"]["for"] == "5m"
    assert alerts["RagTTFTP99SloBreach"]["labels"]["severity"] == "critical"
    layer = alerts["RagRetrievalP999SloBreach"]
    assert layer["for"] == "1m"
    assert layer["expr"].startswith("histogram_quantile(0.999, sum by (le) (rate(vector_search_seconds_bucket")
    assert layer["expr"].endswith("> 0.2")
    # the gateway layer has no histogram: listed with the reason, not dropped silently
    assert any(s.startswith("layer gateway.p99: no histogram of gateway durations") for s in rules.skipped)


def test_contract_alert_keys_are_validated_and_round_trip() -> None:
    import pytest

    from tailscope.errors import ContractError
    from tailscope.io.contracts import dump_contract

    with pytest.raises(ContractError, match=r"c.yaml:3: slo\[0\].for: .*Prometheus duration"):
        parse_contract("name: x\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 1, for: soon}\n", "c.yaml")
    c = parse_contract("name: x\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 1, for: 2m, severity: page}\n")
    assert "for: 2m" in dump_contract(c)
    assert "severity: page" in dump_contract(c)
