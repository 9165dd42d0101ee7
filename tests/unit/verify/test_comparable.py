"""``comparability``: two built-in engine runs are the same target whatever free port each was served on; a URL or a
built-in engine of another GPU is a different one."""

from __future__ import annotations

from typing import Any

from tailscope.verify.comparable import comparability
from tailscope.verify.rundata import RunData


def _run(run_id: str, **target: Any) -> RunData:
    return RunData(id=run_id, run={"target": {"model": "llama-3.1-8b", **target}})


H100 = "llama-3.1-8b on h100-sxm (weights bf16, KV bf16, 446,544 KV tokens, max_num_seqs 1024, speed 1×)"
A100 = "llama-3.1-8b on a100-80gb (weights bf16, KV bf16, 446,544 KV tokens, max_num_seqs 256, speed 1×)"


def test_built_in_runs_on_other_ports_are_the_same_target() -> None:
    a = _run("a", url="http://127.0.0.1:45383", builtin=True, description=H100)
    b = _run("b", url="http://127.0.0.1:44841", builtin=True, description=H100)
    assert comparability(a, b) == ()


def test_a_built_in_engine_on_another_gpu_is_a_different_target() -> None:
    a = _run("a", url="http://127.0.0.1:45383", builtin=True, description=H100)
    b = _run("b", url="http://127.0.0.1:45383", builtin=True, description=A100)
    (line,) = comparability(a, b)
    assert line.startswith("DIFFERENT TARGETS: b measured llama-3.1-8b at the built-in engine (llama-3.1-8b on a100")


def test_servers_at_other_urls_are_different_targets() -> None:
    a = _run("a", url="http://10.0.0.1:8000")
    b = _run("b", url="http://10.0.0.2:8000")
    (line,) = comparability(a, b)
    assert "at http://10.0.0.2:8000" in line
    assert comparability(a, _run("c", url="http://10.0.0.1:8000")) == ()
