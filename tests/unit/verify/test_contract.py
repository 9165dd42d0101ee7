"""Contract parsing: the documented format, line-numbered errors, round trip."""

from __future__ import annotations

import pytest

from tailscope.errors import ContractError
from tailscope.io.contracts import dump_contract, parse_contract

DOC = """\
name: chat-service
slo:
  - {metric: ttft_ms, percentile: p99, max: 1500}
  - {metric: tpot_ms, percentile: p95, max: 50}
  - {metric: e2e_ms, percentile: p99, max: 20000, class: long_context}
  - {metric: error_rate, max: 0.01}
  - {metric: goodput_rps, min: 5}
layers:                                   # dependency contracts, checked on trace sets
  - {layer: retrieval, percentile: p99.9, max_ms: 200}
  - {layer: gateway, percentile: p99, max_ms: 50}
regression:
  baseline: latest:main                   # a run id, a JSON export, or the latest run with a tag
  max_increase: {ttft_ms.p99: 10%, tpot_ms.p95: 5%, output_tokens_per_s: -5%}
  confidence: 0.95
"""


def test_documented_example_parses() -> None:
    c = parse_contract(DOC, "contract.yaml")
    assert c.name == "chat-service"
    assert [s.name for s in c.slos] == [
        "ttft_ms.p99",
        "tpot_ms.p95",
        "e2e_ms.p99[long_context]",
        "error_rate",
        "goodput_rps",
    ]
    assert c.slos[0].max == 1500
    assert c.slos[0].line == 3
    assert c.slos[2].request_class == "long_context"
    assert c.slos[4].min == 5
    assert c.slos[4].max is None
    assert [(lay.layer, lay.percentile, lay.max_ms) for lay in c.layers] == [
        ("retrieval", "p999", 200),
        ("gateway", "p99", 50),
    ]
    reg = c.regression
    assert reg is not None
    assert reg.baseline == "latest:main"
    assert reg.confidence == 0.95
    lims = {lim.key: lim for lim in reg.limits}
    assert lims["ttft_ms.p99"].limit == pytest.approx(0.10)
    assert lims["ttft_ms.p99"].relative
    assert lims["output_tokens_per_s"].limit == pytest.approx(-0.05)
    assert lims["output_tokens_per_s"].higher_is_better


def test_round_trip_through_dump() -> None:
    c = parse_contract(DOC, "c.yaml")
    again = parse_contract(dump_contract(c), "c.yaml")
    strip = lambda cc: (  # noqa: E731
        [(s.metric, s.percentile, s.max, s.min, s.request_class) for s in cc.slos],
        [(lay.layer, lay.percentile, lay.max_ms) for lay in cc.layers],
        [(lim.key, lim.limit, lim.relative) for lim in cc.regression.limits],
    )
    assert strip(again) == strip(c)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "max: 50}",
            "maxx: 50}",
            "c.yaml:4: slo[1].maxx: unknown key (allowed: metric, percentile, max, min, class, for, severity)",
        ),
        ("p95, max", "p97x, max", "c.yaml:4: slo[1].percentile: unknown percentile 'p97x'"),
        ("confidence: 0.95", "confidence: 2", "c.yaml:14: regression.confidence:"),
        ("tpot_ms.p95", "tpot_ms.q95", "c.yaml:13: regression.max_increase: 'tpot_ms.q95': unknown percentile"),
        ("{metric: error_rate", "{metric: error_rat", "c.yaml:6: slo[3].metric:"),
        ("max_ms: 50}", "max_ms: -1}", "c.yaml:10: layers[1].max_ms:"),
        ("{metric: error_rate, max: 0.01}", "{metric: error_rate}", "c.yaml:6: slo[3]: give a limit"),
        ("{metric: tpot_ms, percentile: p95,", "{metric: tpot_ms,", "c.yaml:4: slo[1]: tpot_ms needs a percentile"),
        ("{metric: goodput_rps, min: 5}", "{metric: goodput_rps, percentile: p99, min: 5}", "remove 'percentile'"),
        ("name: chat-service", "name: chat-service\nowner: me", "c.yaml:2: owner: unknown key"),
        ("-5%}", "-5 percent}", "expected a limit like 10%"),
        # issue 26: a band no value can be in was accepted (the gate then judged "≤ 10/s and ≥ 100/s")
        (
            "{metric: goodput_rps, min: 5}",
            "{metric: goodput_rps, min: 100, max: 10}",
            "c.yaml:7: slo[4]: min 100 is above max 10",
        ),
    ],
)
def test_errors_name_file_line_and_field(old: str, new: str, expected: str) -> None:
    assert old in DOC
    with pytest.raises(ContractError) as info:
        parse_contract(DOC.replace(old, new), "c.yaml")
    assert expected in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("text", ["name: [", "- a\n- b\n", "", "slo: []\n"])
def test_not_a_contract(text: str) -> None:
    with pytest.raises(ContractError, match=r"^c\.yaml:\d+: "):
        parse_contract(text, "c.yaml")


def test_absolute_limits_and_percentile_spellings() -> None:
    c = parse_contract(
        "name: x\nslo:\n  - {metric: itl_ms, percentile: P99.9, max: 80}\n  - {metric: ttft_ms, percentile: median, "
        "max: 100}\nregression:\n  max_increase: {e2e_ms.mean: 250, error_rate: 0.005}\n",
        "c.yaml",
    )
    assert [s.percentile for s in c.slos] == ["p999", "p50"]
    assert c.regression is not None
    assert [(lim.key, lim.limit, lim.relative) for lim in c.regression.limits] == [
        ("e2e_ms.mean", 250.0, False),
        ("error_rate", 0.005, False),
    ]


def test_error_rate_percent_is_percentage_points() -> None:
    c = parse_contract("name: x\nregression:\n  max_increase: {error_rate: 1%}\n", "c.yaml")
    assert c.regression is not None
    (lim,) = c.regression.limits
    assert (lim.limit, lim.relative) == (pytest.approx(0.01), False)
    again = parse_contract(dump_contract(c), "c.yaml")
    assert again.regression is not None
    assert again.regression.limits[0].limit == pytest.approx(0.01)
