"""Real servers as they are: a server that refuses tailscope's extensions and sends no ``[DONE]`` is still measured,
with one warning that says what was dropped and what that changes; failures show the server's own message."""

from __future__ import annotations

import pytest

import tailscope
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def test_a_strict_server_without_done_is_measured_with_one_warning() -> None:
    cfg = ScriptedConfig(ttft_ms=5, itl_ms=1, reject_fields=("ignore_eos",), send_done=False, model="strict")
    with ScriptedServer(cfg) as srv:
        res = tailscope.bench(srv.url, requests=12, concurrency=3, output_tokens=6, metrics_url="off")
        bodies = list(srv.truth.bodies)
    assert res.summary.requests.completed == 12, res.summary.warnings
    assert res.summary.requests.failed == 0
    assert len(bodies) == 12  # the probe is not part of the load
    assert all("ignore_eos" not in b for b in bodies)
    assert all(r.output_tokens == 6 for r in res.records)
    refused = [w for w in res.summary.warnings if "refused ignore_eos" in w]
    assert len(refused) == 1
    assert "HTTP 422" in refused[0]
    assert "output lengths are no longer fixed" in refused[0]
    assert res.run.settings["server_refused"] == ["ignore_eos"]


def test_several_refusals_are_dropped_one_by_one() -> None:
    cfg = ScriptedConfig(ttft_ms=5, itl_ms=1, reject_fields=("ignore_eos", "stream_options"), model="stricter")
    with ScriptedServer(cfg) as srv:
        res = tailscope.bench(srv.url, requests=4, output_tokens=3, metrics_url="off")
        bodies = list(srv.truth.bodies)
    assert res.summary.requests.completed == 4
    assert all("stream_options" not in b and "ignore_eos" not in b for b in bodies)
    assert res.run.settings["server_refused"] == ["ignore_eos", "stream_options"]


def test_failures_show_what_the_server_said() -> None:
    with ScriptedServer(ScriptedConfig(mode="error500")) as srv:
        res = tailscope.bench(srv.url, model="scripted", requests=3, metrics_url="off")
    assert res.summary.requests.failed == 3
    said = [w for w in res.summary.warnings if w.startswith("http_5xx (3): HTTP 502")]
    assert said, res.summary.warnings
    assert "Bad Gateway" in said[0]


@pytest.mark.timeout(600)  # the CPU server on a loaded machine: see the docstring
def test_transformers_serve_is_measured_as_it_is(transformers_server, judgement: Judgement) -> None:  # type: ignore[no-untyped-def]
    """Hugging Face ``transformers serve`` refuses ``ignore_eos`` (HTTP 422) and ends streams without ``[DONE]``:
    every request still completes, with the refusal said once. (On a machine loaded past its cores the CPU server has
    taken over 120 s for a first token: such requests are recorded as timeouts, and completion is then not judged.)"""
    srv = transformers_server
    res = tailscope.bench(srv.base_url, model=srv.model, requests=6, concurrency=2, input_tokens=24,
                          output_tokens=8, metrics_url="off")  # fmt: skip
    # a failed record's status is "error" and its class says why: only a slow server's first-token timeouts may fail
    # (this compared the status, "error", with the class and failed on exactly the timeouts it meant to allow)
    failures = {r.error.value if r.error is not None else r.status.value for r in res.records if not r.ok}
    assert failures <= {"timeout_first_token"}, res.summary.warnings
    judgement.holds(res.summary.requests.completed == 6, f"completed: {res.summary.warnings}")
    assert res.run.settings["server_refused"] == ["ignore_eos"]
    assert any("refused ignore_eos" in w for w in res.summary.warnings)
    assert all(r.output_tokens is not None and 1 <= r.output_tokens <= 8 for r in res.records if r.ok)
