"""Issue 24 defect: ``tailscope sim --profile examples/support-chat.yaml --requests 300`` crashed with an IndexError
in sim/records.py (a session turn that completed with no token times). Every completed request, session turns
included, must carry its token times, at the count that crashed and around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.errors import InternalError
from tailscope.sim.records import record_ok
from tailscope.workload.spec import RequestSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support-chat.yaml"


@pytest.mark.parametrize("requests", [150, 300, 500])
def test_support_chat_profile_simulates_with_token_times(requests: int) -> None:
    import tailscope

    result = tailscope.simulate(profile=EXAMPLE, requests=requests)
    records = [r for r in result.records if not r.warmup]
    assert len(records) >= requests * 0.9
    turns = [r for r in records if r.session_id is not None and (r.turn or 0) > 0]
    assert turns, "the profile's conversations have later turns"
    for r in records:
        if r.ok:
            assert r.first_token_ns is not None
            assert r.chunk_times_ns
            assert r.output_tokens == len(r.chunk_times_ns)


def test_a_completion_without_token_times_is_named_not_an_index_error() -> None:
    spec = RequestSpec(7, 100, 3, session_id="s1", turn=2)
    with pytest.raises(InternalError, match=r"request 7 \(session s1, turn 2\) completed with no token times"):
        record_ok(spec, 5, 180, 1, ())
