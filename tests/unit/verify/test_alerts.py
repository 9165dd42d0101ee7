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
    for name in ("RequestsQueueing", "KvCacheNearFull", "Preemptions", "EngineDown"):
        assert f"ChatService{name}" in alerts
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
