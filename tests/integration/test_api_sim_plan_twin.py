"""The library's predict, plan and twin functions: typed results, a store only when given, errors as TailscopeErrors.

twin_check runs against the built-in server over real HTTP (loopback); the real-vLLM check is test_twin_vllm.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

import tailscope
from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel

pytestmark = pytest.mark.integration

TWIN = TwinModel(
    coefficients=TwinCoefficients(4000, 300, 0.5, 20, 0.01, 10_000, 0),
    stderr=TwinCoefficients(100, 10, 0.05, 1, 0.001, 500, 0),
    facts=ServerFacts(block_size=16, num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=2048),
)


def twin_file(tmp_path: Path) -> Path:
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(TWIN.to_mapping()), encoding="utf-8")
    return path


def stores(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.suffix == ".duckdb" or p.name == ".tailscope"]


def test_simulate_writes_a_store_only_when_given_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sim = tailscope.simulate(requests=120, rate=5, input_tokens=200, output_tokens=16, slo=["ttft_p99=2s"])
    assert sim.summary.requests.completed == 120
    assert sim.summary.slo[0].passed
    assert sim.sim.steps > 0
    assert sim.store_path is None
    assert not stores(tmp_path)
    assert sim.to_dict()["summary"]["sim"]["requests"] == 120

    kept = tailscope.simulate(requests=50, rate=5, output_tokens=8, store="runs.duckdb")
    assert kept.store_path is not None
    assert kept.store_path.endswith("runs.duckdb")
    run = tailscope.load_run("latest", store="runs.duckdb")
    assert run.id == kept.run.id
    assert run.kind == "sim"
    assert len(run.records) == 50
    assert run.summary is not None
    assert run.summary["sim"]["steps"] == kept.sim.steps
    assert run.samples  # the timeline, as server samples


def test_simulate_with_a_twin_gives_a_prediction_interval(tmp_path: Path) -> None:
    sim = tailscope.simulate(calibration=twin_file(tmp_path), rate=2, requests=40, input_tokens=128, output_tokens=16)
    interval = sim.prediction_interval
    assert interval is not None
    low, high = interval["ttft_ms"]["p50"]
    assert low <= sim.summary.ttft_ms.p50 <= high
    assert "prediction_interval" in sim.summary_dict()


def test_plan_functions_return_typed_results_and_refuse_bad_input(tmp_path: Path) -> None:
    budget = tailscope.plan_budget(300, layers={"gateway": "50ms", "inference": 120.0}, buffer=0.2)
    assert budget.ok
    assert [lb.layer for lb in budget.layers] == ["gateway", "inference"]
    out = tailscope.plan_budget("300ms", layers=["gateway=500ms"], out=tmp_path / "c" / "contract.yaml")
    assert not out.ok
    assert (tmp_path / "c" / "contract.yaml").exists()
    with pytest.raises(tailscope.ConfigError, match="--layer"):
        tailscope.plan_budget("300ms")
    with pytest.raises(tailscope.ConfigError, match="--tp"):
        tailscope.plan_capacity("llama-3.1-8b", "h100-sxm", target_rps=5, tp="1,x")

    sim = tailscope.simulate(replicas=2, tp=2, rate=5, requests=100, output_tokens=16)
    cost = tailscope.plan_cost(gpu_price=2.0, run=sim)
    assert cost.gpus == 4  # a sim run knows its deployment
    assert cost.usd_per_million_output_tokens == pytest.approx(4 * 2.0 / 3600 / cost.output_tokens_per_s * 1e6)
    # issue 28: a bench run on the built-in engine records its one replica at TP 1; no --gpus asked
    built_in = tailscope.bench(requests=3, input_tokens=16, output_tokens=4)
    assert tailscope.plan_cost(gpu_price=2.0, run=built_in).gpus == 1

    kv = tailscope.plan_kv("llama-3.1-8b", context=4096, gpu="h100-sxm")
    assert kv.max_sequences is not None
    assert kv.max_sequences > 0
    est = tailscope.plan_estimate("llama-3.1-8b", "h100-sxm", input_tokens=256, output_tokens=64)
    assert est.e2e_ms > est.ttft_ms > 0


def test_calibrate_needs_a_server_or_runs() -> None:
    with pytest.raises(tailscope.ConfigError, match="--url"):
        tailscope.calibrate()


def test_calibrate_from_stored_runs_after_the_server_is_gone(tmp_path: Path) -> None:
    """Built-in runs: the engine is gone when they are refitted, so its facts come from the runs' scraped
    ``vllm:cache_config_info``; a run with no lone requests at two prompt lengths is refused with what to add."""
    store = tmp_path / "runs.duckdb"
    busy = tailscope.bench(requests=24, concurrency=4, input_tokens=200, output_tokens=16, store=store)
    with pytest.raises(tailscope.ConfigError, match="prefill time cannot be fitted") as refused:
        tailscope.calibrate(from_runs=[busy.run.id], store=store)
    assert "--input-tokens uniform" in str(refused.value)
    lone = tailscope.bench(requests=30, concurrency=1, input_tokens="uniform:100:1500", output_tokens=24, store=store)
    cal = tailscope.calibrate(from_runs=[lone.run.id, busy.run.id], store=store, out=tmp_path / "twin.yaml")
    assert cal.twin.facts.block_size == 16
    assert cal.twin.facts.num_blocks > 0
    assert cal.notes["server facts"].startswith("from the runs' scraped")
    assert "caveat" not in cal.notes  # two batch sizes seen
    assert "noisy fit" not in cal.notes  # the built-in engine's steps do not wander
    assert (tmp_path / "twin.yaml").exists()
    alone = tailscope.calibrate(from_runs=[lone.run.id], store=store)
    assert "one batch size only" in alone.notes["caveat"]

    # the trained step model as the prior, the runs as its update (issue 23, item 10)
    ref = "llama-3.1-8b@h100-sxm"
    informed = tailscope.calibrate(from_runs=[lone.run.id], store=store, prior=ref)
    report = informed.twin.fitted_on["prior"]
    assert "llama-3.1-8b on h100-sxm ×1, vllm" in report["source"]
    terms = set(report["mean_us"])
    assert set(report["used"]) | set(report["rejected"]) == terms
    assert not set(report["used"]) & set(report["rejected"])
    assert informed.notes["prior"].startswith("used on")
    # one batch size cannot split the step's cost from each sequence's: alone the split is arbitrary, with the prior
    # each term is the physics' (inside its prior's 3 sd) and their sum stays what the runs measured
    c, m, sd = informed.twin.coefficients, report["mean_us"], report["sd_us"]
    assert "per_seq_us" in report["used"]
    assert abs(c.per_seq_us - m["per_seq_us"]) < 3 * sd["per_seq_us"]
    a = alone.twin.coefficients
    assert c.step_overhead_us + c.per_seq_us == pytest.approx(a.step_overhead_us + a.per_seq_us, rel=0.1)
    assert informed.twin.stderr.per_seq_us <= sd["per_seq_us"] * 1.01  # the posterior is no wider than the prior


def test_a_bad_prior_fails_before_any_load() -> None:
    with pytest.raises(tailscope.ConfigError, match=r"^--prior 'llama-3\.1-8b': expected MODEL@GPU"):
        tailscope.calibrate(url="http://127.0.0.1:9", prior="llama-3.1-8b")
    with pytest.raises(tailscope.ConfigError, match=r"weights per GPU.*MODEL@GPUxTP"):
        tailscope.calibrate(url="http://127.0.0.1:9", prior="llama-3.1-70b@h100-sxm")


def test_twin_check_against_the_builtin_server_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tailscope.serve.embedded import start_embedded_server

    monkeypatch.chdir(tmp_path)
    path = twin_file(tmp_path)
    phases: list[str] = []

    async def main() -> tailscope.TwinCheck:
        async with start_embedded_server(isolation="thread", speed=8.0) as server:
            return await tailscope.twin_check_async(
                path, server.base_url, concurrency=2, requests=12, input_tokens=64, output_tokens=8,
                on_phase=phases.append,
            )  # fmt: skip

    check = asyncio.run(asyncio.wait_for(main(), timeout=120))
    assert {(r["metric"], r["percentile"]) for r in check.report["rows"]} >= {("ttft_ms", "p50"), ("tpot_ms", "p90")}
    assert check.passed == (not check.failed)
    assert len(check.measured) == 1
    assert check.measured[0].summary.requests.completed == 12
    assert check.report["measured_run"] == check.measured[0].run.id
    assert check.prediction.prediction_interval is not None
    # the server's steady decode against the twin's at equal batch, the rows by stream count
    steady = check.report["steady_decode"]
    assert set(steady) == {"ratio", "by_streams"}
    assert all(set(row) == {"measured_ms", "predicted_ms", "measured_gaps", "predicted_gaps"}
               for row in steady["by_streams"].values())  # fmt: skip
    assert phases[0].startswith("predicting")
    assert not stores(tmp_path)
    with pytest.raises(tailscope.ConfigError, match="bounded"):
        tailscope.twin_check(path, "http://127.0.0.1:9")


def test_twin_check_simulates_the_closed_loop_its_bench_starts(tmp_path: Path) -> None:
    """The prediction and the measurement start the clients alike: all at once by default (bench's start, not sim's
    spread), or over --stagger seconds in both; a stagger with an open loop is refused before any load."""
    from tailscope.serve.embedded import start_embedded_server

    path = twin_file(tmp_path)

    async def main(stagger: float | None) -> tailscope.TwinCheck:
        async with start_embedded_server(isolation="thread", speed=8.0) as server:
            return await tailscope.twin_check_async(
                path, server.base_url, concurrency=3, requests=30, input_tokens=64, output_tokens=8, stagger=stagger,
            )  # fmt: skip

    for stagger, start in ((None, 0.0), (0.06, 0.06)):
        check = asyncio.run(asyncio.wait_for(main(stagger), timeout=120))
        assert check.prediction.sim.clients_stagger_s == start
        assert check.measured[0].run.settings["stagger_s"] == start
        sent = [r.scheduled_ns / 1e9 for r in check.measured[0].records]
        assert sum(t < 0.005 for t in sent) == (3 if start == 0 else 1)  # who started at once: all, or slot 0 alone
        for slot in range(1, 3):  # slot i's first request at i / 3 × stagger
            assert any(abs(t - slot * start / 3) < 0.005 for t in sent)
    with pytest.raises(tailscope.ConfigError, match="--stagger"):
        tailscope.twin_check(path, "http://127.0.0.1:9", rate=2, requests=4, stagger=1.0)
