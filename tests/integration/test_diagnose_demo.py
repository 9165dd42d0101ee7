"""The built-in engine's demo run (``make demo``'s workload, scaled down): ``diagnose`` names prefill interference.

The built-in engine runs a prefill in the same step as the running decodes (no chunked prefill), so every new prompt
stalls the streams in flight for its prefill — the pauses fall inside other requests' prefills, with 0 preemptions.
Before, diagnose blamed proxies or GC. The assertion is on the attribution (which rule, which branch), not on timings.
"""

from __future__ import annotations

import pytest

import tailscope

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_run_is_diagnosed_as_prefill_interference() -> None:
    result = tailscope.bench(requests=80, concurrency=16, input_tokens="uniform:100:900", output_tokens=128)
    diagnosis = tailscope.diagnose(result)
    rules = [f.rule for f in diagnosis.findings]
    assert "prefill_interference" in rules, diagnosis.to_dict()
    found = next(f for f in diagnosis.findings if f.rule == "prefill_interference")
    assert any("0 preemptions: not KV pressure" in e for e in found.evidence)
    stutter = diagnosis.tree("stutter")
    assert stutter.present
    assert stutter.branches[0].verdict == "yes"  # pauses coincide with other requests' prefills
    assert stutter.branches[1].verdict == "no"  # no preemptions
    if "stalls" in rules:
        stalls = next(f for f in diagnosis.findings if f.rule == "stalls")
        assert "other requests' prefills" in stalls.cause
        assert rules.index("prefill_interference") < rules.index("stalls")
