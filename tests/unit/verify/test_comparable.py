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


def test_a_built_in_engine_with_another_engines_costs_is_a_different_target() -> None:
    """``serve --engine sglang`` runs other step costs on the same model and GPU: its description says so, so a run
    of it does not compare as the vLLM-costed one (whose description is what it always was)."""
    from tailscope.serve.engine_factory import build_replica

    vllm, sglang = (build_replica("llama-3.1-8b", "h100-sxm", backend=b)[1].description for b in ("vllm", "sglang"))
    assert vllm == H100
    assert "(sglang costs, weights bf16" in sglang
    a = _run("a", url="http://127.0.0.1:45383", builtin=True, description=vllm)
    b = _run("b", url="http://127.0.0.1:45383", builtin=True, description=sglang)
    (line,) = comparability(a, b)
    assert line.startswith("DIFFERENT TARGETS")


def test_servers_at_other_urls_are_different_targets() -> None:
    a = _run("a", url="http://10.0.0.1:8000")
    b = _run("b", url="http://10.0.0.2:8000")
    (line,) = comparability(a, b)
    assert "at http://10.0.0.2:8000" in line
    assert comparability(a, _run("c", url="http://10.0.0.1:8000")) == ()


def _cached(run_id: str, *, metrics: float | None = None, usage: float | None = None) -> RunData:
    summary: dict[str, Any] = {}
    if metrics is not None:
        summary["server"] = {"prefix_cache_hit_rate": metrics}
    if usage is not None:
        summary["prompt_cache"] = {"requests": 10, "cached_tokens": 1, "prompt_tokens": 2, "hit_rate": usage}
    return RunData(id=run_id, summary=summary)


def test_cache_state_from_metrics_or_from_usage_cached_tokens() -> None:
    """Issue 28: a server without /metrics still reports cached tokens per request; the cache warning uses them."""
    (line,) = comparability(_cached("a", usage=0.1), _cached("b", usage=0.9))
    assert line.startswith("CACHE STATE: prefix-cache hit rate 10% in a vs 90% in b (> 10% apart, from usage)")
    (line,) = comparability(_cached("a", metrics=0.66, usage=0.1), _cached("b", metrics=0.99, usage=0.1))
    assert "from /metrics" in line  # the server's counters first, when both runs have them
    assert comparability(_cached("a", metrics=0.5), _cached("b", usage=0.9)) == ()  # no common source: no claim
    assert comparability(_cached("a", usage=0.50), _cached("b", usage=0.55)) == ()


def test_different_workloads_are_said() -> None:
    a = RunData(id="a", settings={"concurrency": 4, "input_tokens": "512"})
    b = RunData(id="b", settings={"concurrency": 16, "input_tokens": "512"})
    (line,) = comparability(a, b)
    assert line.startswith("DIFFERENT WORKLOADS: b vs a: concurrency 4 vs 16")
