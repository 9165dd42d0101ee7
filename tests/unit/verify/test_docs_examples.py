"""The contracts shown in docs/gates.md, examples/contract.yaml and examples/deps.yaml are valid; the CI example is
valid YAML."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tailscope.io.contracts import parse_contract

REPO = Path(__file__).resolve().parents[3]


def test_documented_contracts_parse() -> None:
    doc = (REPO / "docs" / "gates.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert parse_contract(blocks[0], "docs/gates.md").name == "chat-service"
    workflow = next(w for b in blocks if isinstance(w := yaml.safe_load(b), dict) and "jobs" in w)
    steps = workflow["jobs"]["perf"]["steps"]
    assert any("tailscope gate" in str(step.get("run", "")) for step in steps)
    example = (REPO / "examples" / "contract.yaml").read_text(encoding="utf-8")
    contract = parse_contract(example, "examples/contract.yaml")
    assert len(contract.slos) == 6
    assert contract.regression is not None
    assert contract.layers == ()  # a run alone can be gated on it: its dependency contracts are in deps.yaml
    deps = parse_contract((REPO / "examples" / "deps.yaml").read_text(encoding="utf-8"), "examples/deps.yaml")
    assert (len(deps.slos), len(deps.layers)) == (0, 2)
