"""``record_ok`` fills a RequestRecord's slots directly; the result must equal the constructor's."""

from __future__ import annotations

from dataclasses import fields

from tailscope.records import RequestRecord, Status, TokensSource
from tailscope.sim.records import ones, record_ok
from tailscope.workload.spec import RequestSpec


def test_record_ok_equals_the_constructor() -> None:
    spec = RequestSpec(7, 100, 3, request_class="chat", prefix_id=2, prefix_tokens=50, session_id="s1", turn=1)
    times = (10, 20, 35)
    got = record_ok(spec, 5, 180, 1, times)
    want = RequestRecord(
        id=7,
        scheduled_ns=5,
        sent_ns=5,
        first_token_ns=10,
        end_ns=35,
        status=Status.OK,
        request_class="chat",
        session_id="s1",
        turn=1,
        input_tokens=180,
        output_tokens=3,
        requested_output_tokens=3,
        tokens_source=TokensSource.ENGINE,
        chunk_times_ns=times,
        chunk_tokens=(1, 1, 1),
        warmup=False,
        shared_prefix=True,
        stream_end_ns=35,
        first_event_ns=10,
        worker=1,
    )
    assert got == want
    for f in fields(RequestRecord):  # every slot is set (equality alone would raise on an unset slot anyway)
        assert getattr(got, f.name) == getattr(want, f.name), f.name


def test_ones_is_shared_and_exact() -> None:
    assert ones(4) == (1, 1, 1, 1)
    assert ones(4) is ones(4)
    assert ones(0) == ()
