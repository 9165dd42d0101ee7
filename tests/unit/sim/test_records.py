"""``record_ok`` builds the RequestRecord a completed simulated request stands for, every field as written out here."""

from __future__ import annotations

from dataclasses import fields

from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.sim.records import ones, record_error, record_ok
from tailscope.workload.spec import RequestSpec


def test_record_ok_fills_every_field() -> None:
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


def test_record_error_refused_and_incomplete() -> None:
    spec = RequestSpec(3, 9000, 16, session_id="s2", turn=0, after=((1, 0), (2, 0)), step="plan")
    refused = record_error(spec, 5, 9000, -1, 40, "too long for the KV cache")
    assert (refused.status, refused.error, refused.http_status) == (Status.ERROR, ErrorClass.HTTP_4XX, 400)
    assert (refused.sent_ns, refused.first_token_ns, refused.end_ns, refused.output_tokens) == (5, None, 40, 0)
    assert refused.worker == 0  # not placed on a replica yet
    assert (refused.step, refused.depends_on, refused.requested_output_tokens) == ("plan", (1, 2), 16)
    cut = record_error(spec, 5, 9000, 2, 90, "in flight at the horizon", incomplete=True, sent_ns=7)
    assert (cut.status, cut.error, cut.http_status, cut.sent_ns, cut.worker) == (Status.INCOMPLETE, None, None, 7, 2)
    assert cut.error_detail == "in flight at the horizon"
