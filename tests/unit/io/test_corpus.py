"""The calibration corpus: CSV validation, the parallelism normalisation rules, and every configuration runnable."""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Parallelism
from tailscope.errors import ConfigError, PlanError
from tailscope.io.corpus import CorpusRow, PoolDeployment, load_corpus, observations, parse_corpus
from tailscope.io.corpus_recipes import RECIPES, Recipe, apply_recipes, recipe_pool, recipes
from tailscope.sim.run import SimArgs, build_cluster, run_sim

HEADER = (
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
    "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
    "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
    "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
    "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms"
)


def _agg(
    rid: str, conc: int, batch: int, tp: str, adp: str, mtp: str, mep: str, model: str = "deepseek-ai/DeepSeek-R1"
):  # type: ignore[no-untyped-def]
    src = f"db; silicon_concurrency={conc}; x"
    return f"{rid},{src},sglang,0.5.9,{model},b200_sxm,fp8,agg,1024,1024,fp8,fp8,{batch},{tp},1,{adp},{mtp},{mep}" + (
        ",,,,,,,,,,,,,,,100.5,10.25"
    )


def test_parallel_encodings_are_normalised() -> None:
    text = "\n".join(
        [
            HEADER,
            _agg("plain", 64, 64, "8", "1", "1", "8"),  # tp 8, EP 8
            _agg("product", 64, 64, "64", "1", "8", "8"),  # tp_size = moe_tp × moe_ep: 8 GPUs
            _agg("2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c64_tp8_ep8_12", 64, 1, "1", "64", "8", "8"),
            _agg("dp", 256, 32, "1", "8", "1", "8"),  # attention DP 8: batch per rank
            _agg("dense", 64, 32, "2", "", "1", "1", model="Qwen/Qwen3-32B"),  # 64 / 32: two replicas
        ]
    )
    rows = {r.id: r for r in parse_corpus(text, source="x.csv")}
    assert rows["plain"].agg is not None
    assert (rows["plain"].agg.gpus, rows["plain"].agg.tp, rows["plain"].agg.ep) == (8, 8, 8)
    assert rows["product"].agg == rows["plain"].agg
    dp_id = next(k for k in rows if k.startswith("2026_04_06"))
    p = rows[dp_id].agg
    assert p is not None
    assert (p.gpus, p.tp, p.attention_dp, p.ep) == (8, 1, 8, 8)
    p = rows["dp"].agg
    assert p is not None
    assert (p.gpus, p.tp, p.attention_dp) == (8, 1, 8)
    p = rows["dense"].agg
    assert p is not None
    assert (p.gpus, p.workers) == (2, 2)
    assert rows["plain"].precision == "fp8"
    assert rows["plain"].kv_dtype == "fp8"
    assert rows["plain"].config_key == ("deepseek-ai/DeepSeek-R1", "b200_sxm", "sglang", "fp8", "agg")
    assert "--ep" in rows["plain"].sim_flags()
    flags = rows["plain"].sim_flags()  # rule 7: SGLang (and vLLM) rows at 0.95 of all memory
    assert flags[flags.index("--gpu-memory-utilization") + 1] == "0.95"
    trt = replace(rows["plain"], engine="trtllm")  # TensorRT-LLM's own default, 0.9 of what the weights leave
    assert trt.sim_flags()[flags.index("--gpu-memory-utilization") + 1] == "0.9"


def test_wide_moe_pools_without_expert_parallelism_are_attention_dp() -> None:
    """Rule 9: a tensor-parallel size that does not divide the heads, or an MoE pool of more than 16 GPUs recording
    neither attention DP nor expert parallelism, is attention DP with experts over every GPU (wide EP)."""
    text = "\n".join(
        [
            HEADER,
            _agg("tp36", 64, 64, "36", "1", "36", "1"),  # 128 heads do not split 36 ways
            _agg("tp32", 64, 64, "32", "1", "32", "1"),  # divides the heads, but 32-way expert TP: the same series
            _agg("tp16", 64, 64, "16", "1", "16", "1"),  # two HGX nodes of tensor parallelism: kept
            _agg("tp32ep8", 64, 64, "32", "1", "4", "8"),  # expert parallelism recorded: kept
        ]
    )
    rows = {r.id: r.agg for r in parse_corpus(text, source="x.csv")}
    assert all(p is not None for p in rows.values())
    shapes = {k: (p.gpus, p.tp, p.attention_dp, p.ep) for k, p in rows.items() if p is not None}
    assert shapes["tp36"] == (36, 1, 36, 36)
    assert shapes["tp32"] == (32, 1, 32, 32)
    assert shapes["tp16"] == (16, 16, 1, 1)
    assert shapes["tp32ep8"] == (32, 32, 1, 8)


def test_bad_rows_name_file_line_and_column(tmp_path: Path) -> None:
    good = _agg("ok", 4, 4, "8", "1", "8", "1")
    with pytest.raises(ConfigError, match=r"x\.csv:3: backend must be one of"):
        parse_corpus("\n".join([HEADER, good, good.replace("sglang", "tgi")]), source="x.csv")
    with pytest.raises(ConfigError, match=r"x\.csv:2: isl"):
        parse_corpus("\n".join([HEADER, good.replace(",1024,1024,", ",many,1024,")]), source="x.csv")
    with pytest.raises(ConfigError, match=r"x\.csv:2: model_path"):
        parse_corpus("\n".join([HEADER, good.replace("deepseek-ai/DeepSeek-R1", "acme/unknown-9b")]), source="x.csv")
    with pytest.raises(ConfigError, match="missing column"):
        parse_corpus("id,backend\nx,vllm\n", source="x.csv")
    with pytest.raises(ConfigError, match="cannot read"):
        load_corpus(tmp_path / "nope.csv")


def _sim_args(row: CorpusRow, requests: int) -> SimArgs:
    """Map the row's ``tailscope sim`` flags onto SimArgs (the CLI's own parsing is tested in the CLI tests)."""
    flags = row.sim_flags()
    opts = dict(zip(flags[0::2], flags[1::2], strict=True))
    return SimArgs(
        model=opts["--model"],
        gpu=opts["--gpu"],
        backend=opts["--engine"],
        weights_dtype=opts["--weights-dtype"],
        kv_dtype=opts["--kv-dtype"],
        tp=int(opts.get("--tp", 1)),
        attention_dp=int(opts.get("--attention-dp", 1)),
        ep=int(opts.get("--ep", 1)),
        replicas=int(opts.get("--replicas", 1)),
        disagg=opts.get("--disagg"),
        concurrency=int(opts["--concurrency"]),
        gpu_memory_utilization=float(opts["--gpu-memory-utilization"]),
        input_tokens=opts["--input-tokens"],
        output_tokens=opts["--output-tokens"],
        requests=requests,
        store=False,
    )


def test_every_corpus_configuration_resolves_to_sim_flags(calibration_dir: Path) -> None:
    """Every distinct deployment of silicon_dev.csv maps to ``tailscope sim`` flags that resolve (model, GPU, engine,
    precision, parallelism, KV that fits); a handful are simulated end to end."""
    rows = load_corpus(calibration_dir / "silicon_dev.csv")
    assert len(rows) == 4255
    distinct: dict[tuple[object, ...], CorpusRow] = {}
    for r in rows:
        distinct.setdefault((r.config_key, r.agg, r.prefill, r.decode), r)
    configs: dict[tuple[str, ...], list[CorpusRow]] = defaultdict(list)
    for r in distinct.values():
        configs[r.config_key].append(r)
    assert len(configs) == 85
    for r in distinct.values():
        if r.agg is not None:
            cluster = build_cluster(_sim_args(r, 1))
            assert cluster.perf().kv_capacity_tokens(0.95) >= r.isl + r.osl, r.id
        else:
            assert r.prefill is not None
            assert r.decode is not None
            pools = {"prefill": r.prefill, "decode": r.decode}
            try:  # the sim flags give each pool the row's parallelism, one scheduling rank per attention-DP rank
                cluster = build_cluster(_sim_args(r, 1))
            except PlanError:  # a rank too small to hold the weights would be a normalisation bug
                pytest.fail(f"{r.id}: a pool does not fit")
            for name, p in pools.items():
                assert cluster.pool_parallelism(name) == Parallelism(p.tp, p.attention_dp, p.ep), r.id
                assert cluster.ranks(name) == p.workers * p.attention_dp, r.id
            pre, dec = cluster.perf("prefill"), cluster.perf("decode")
            assert isinstance(dec, TrainedStepModel)
            assert dec.kv_capacity_tokens(0.95) > 0
            assert pre.step_ns([(r.isl, 0)], 0, 0) > 0
            assert cluster.kv_transfer().ns(r.isl) > 0
    # a handful end to end: one per engine
    seen: set[str] = set()
    for key in sorted(configs):
        r = configs[key][0]
        if r.agg is None or r.engine in seen or r.concurrency > 64:
            continue
        seen.add(r.engine)
        out = run_sim(_sim_args(r, 3 * r.concurrency))
        assert out.summary["requests"]["completed"] == 3 * r.concurrency
        assert out.summary["ttft_ms"]["mean"] > 0
    assert seen == {"vllm", "sglang", "trtllm"}
    # and disaggregated ones with attention-DP decode ranks, one per engine
    seen = set()
    for key in sorted(configs):
        for r in configs[key]:
            if r.decode is None or r.engine in seen or r.decode.attention_dp == 1 or r.concurrency > 64:
                continue
            seen.add(r.engine)
            out = run_sim(_sim_args(r, 2 * r.concurrency))
            assert out.summary["requests"]["completed"] == 2 * r.concurrency
            assert out.result.kv_transfer_s > 0
    assert seen == {"vllm", "sglang", "trtllm"}


def _disagg(
    rid: str,
    conc: int,
    workers: tuple[str, str],
    decode: tuple[str, str, str],
    ttft: str = "812.5",
    model: str = "deepseek-ai/DeepSeek-R1",
):  # type: ignore[no-untyped-def]
    """A disaggregated row: 8-GPU TP prefill workers; decode (tp, attention DP, EP); worker counts may be empty."""
    pw, dw = workers
    dtp, dadp, dep = decode
    pb = "1" if pw else ""
    db = str(conc) if dw else ""
    src = f"db; silicon_concurrency={conc}; x"
    return (
        f"{rid},{src},trtllm,1.2,{model},b200_sxm,fp8,disagg,8192,1024,fp8,fp8,,,,,,,"
        f"{pb},{pw},8,1,1,1,8,{db},{dw},{dtp},1,{dadp},1,{dep},{ttft},31.25"
    )


def test_a_repeated_measurement_takes_the_recorded_rows_deployment() -> None:
    """Rule 5 (a): the export repeats DeepSeek-R1 measurements under DeepSeek-V3 with the worker counts left out; the
    copy gets the recorded deployment, not an imputed one."""
    text = "\n".join(
        [
            HEADER,
            _disagg("recorded", 4096, ("1", "1"), ("1", "8", "8"), model="deepseek-ai/DeepSeek-V3"),
            _disagg("copy", 4096, ("", ""), ("1", "8", "8")),
            _disagg("other", 4096, ("", ""), ("1", "8", "8"), ttft="900.0"),  # another measurement: imputed
        ]
    )
    rows = {r.id: r for r in parse_corpus(text, source="x.csv")}
    rec, copy, other = rows["recorded"], rows["copy"], rows["other"]
    assert rec.workers == "recorded"
    assert copy.workers == "duplicate"
    assert (copy.prefill, copy.decode) == (rec.prefill, rec.decode)
    assert copy.prefill is not None
    assert copy.prefill.workers == 1
    assert copy.decode is not None
    assert copy.decode.workers == 1
    assert other.workers == "imputed"
    assert other.decode is not None
    assert other.decode.workers == 8
    assert "--disagg" in copy.sim_flags()
    # each pool as simulated: the prefill worker TP 8 with its experts over 8, the decode worker 8 attention-DP ranks
    assert "prefill=1x8:ep8,decode=1x8:dp8:ep8" in copy.sim_flags()


@pytest.mark.parametrize(
    ("conc", "decode", "prefill_workers", "decode_workers"),
    [
        (1, ("8", "1", "8"), 1, 1),  # one client: one rank
        (3, ("8", "1", "8"), 1, 3),
        (16, ("8", "1", "8"), 1, 4),  # 4 decode ranks at low load (recorded median)
        (256, ("8", "1", "8"), 1, 4),  # 64 requests per rank at most
        (257, ("8", "1", "8"), 2, 5),  # two prefill workers above 256 clients
        (1024, ("8", "1", "8"), 2, 16),
        (16, ("1", "8", "8"), 1, 1),  # attention DP 8: one worker holds 8 ranks
        (2048, ("1", "8", "8"), 2, 4),  # 32 ranks
    ],
)
def test_missing_worker_counts_follow_the_recorded_rows(
    conc: int, decode: tuple[str, str, str], prefill_workers: int, decode_workers: int
) -> None:
    """Rule 5 (b): one prefill worker up to 256 clients (two above), max(min(C, 4), ⌈C / 64⌉) decode ranks."""
    (row,) = parse_corpus("\n".join([HEADER, _disagg("r", conc, ("", ""), decode)]), source="x.csv")
    assert row.workers == "imputed"
    assert row.prefill is not None
    assert row.decode is not None
    assert (row.prefill.workers, row.decode.workers) == (prefill_workers, decode_workers)
    assert row.prefill.gpus == 8
    assert row.decode.gpus == 8


def _recipe(
    rid: str, spec: str, prefill: tuple[int, int, int, int], decode: tuple[int, int, int, int], draft: int = 0
) -> dict[str, Recipe]:
    """Rule 10's table with one entry: pools as (workers, tp, ep, dp-attn)."""
    return {rid: Recipe(spec, recipe_pool(*map(str, prefill)), recipe_pool(*map(str, decode)), draft)}


def test_a_public_recipe_fills_in_an_imputed_rows_workers_and_says_if_it_decoded_speculatively() -> None:
    """Rule 10: an imputed row listed by its recipe takes the recipe's pools when the GPUs per worker agree."""
    (row,) = parse_corpus("\n".join([HEADER, _disagg("r", 1024, ("", ""), ("1", "8", "8"))]), source="x.csv")
    assert row.workers == "imputed"
    (listed,) = apply_recipes([row], _recipe("r", "mtp", (3, 8, 8, 0), (5, 8, 8, 1), draft=3))
    assert listed.workers == "recipe"
    assert (listed.spec, listed.spec_draft) == ("mtp", 3)
    assert observations([listed])[0].spec_draft == 3  # the fit prices its decodes speculatively
    flags = listed.sim_flags()  # and `tailscope sim` runs it so
    assert flags[flags.index("--spec-draft") + 1] == "3"
    assert 0 < float(flags[flags.index("--spec-accept") + 1]) < 1
    assert listed.prefill == PoolDeployment(8, 8, 1, 8, 3)  # tensor-parallel attention, experts over 8
    assert listed.decode == PoolDeployment(8, 1, 8, 8, 5)  # attention DP 8 ("dp-attn")
    assert "prefill=3x8:ep8,decode=5x8:dp8:ep8" in listed.sim_flags()
    # GPUs per worker that disagree with the row's: the row keeps rule 5's pools, and still carries the spec
    (other,) = apply_recipes([row], _recipe("r", "none", (1, 4, 4, 1), (2, 8, 8, 1)))
    assert (other.workers, other.spec, other.spec_draft) == ("imputed", "none", 0)
    assert (other.prefill, other.decode) == (row.prefill, row.decode)
    # a recorded or copied deployment is never replaced; an unlisted row is untouched
    recorded = replace(row, workers="recorded")
    (kept,) = apply_recipes([recorded], _recipe("r", "none", (3, 8, 8, 0), (5, 8, 8, 1)))
    assert (kept.workers, kept.prefill) == ("recorded", row.prefill)
    assert apply_recipes([row], {}) == [row]


def test_an_aggregated_row_takes_only_its_recipes_decoding() -> None:
    """Rule 10 on an aggregated row (listed by its image's single-node entry): spec and draft, its deployment kept."""
    (row,) = parse_corpus("\n".join([HEADER, _agg("a", 64, 64, "8", "1", "1", "1")]), source="x.csv")
    (listed,) = apply_recipes([row], {"a": Recipe("mtp", None, None, 3)})
    assert (listed.spec, listed.spec_draft, listed.agg, listed.workers) == ("mtp", 3, row.agg, row.workers)
    assert observations([listed])[0].spec_draft == 3
    flags = listed.sim_flags()
    assert flags[flags.index("--spec-draft") + 1] == "3"
    assert "--disagg" not in flags
    (plain,) = apply_recipes([row], {"a": Recipe("none", None, None)})
    assert (plain.spec, plain.spec_draft, plain.agg) == ("none", 0, row.agg)


def test_the_recipe_table_is_well_formed() -> None:
    """The committed table (scripts/inferencex_recipes.py writes it): a known spec (or none stated, on a row listed
    for its launch script's settings only), draft tokens only on MTP runs, batch waiting with both of its settings
    and a budget, launch settings on aggregated rows only, pools of ≥ 1 worker whose expert parallelism divides their
    GPUs (both pools, or neither: an aggregated row)."""
    table = recipes()
    assert len(table) > 500
    assert {r.spec for r in table.values()} <= {"none", "mtp", "unknown", ""}
    assert sum(r.prefill is None for r in table.values()) > 500  # aggregated rows
    assert sum(r.launch.batch_wait_iters > 0 for r in table.values()) >= 50
    for r in table.values():
        assert (r.launch.batch_wait_iters > 0) == (0 < r.launch.batch_wait_ratio <= 1) == (r.launch.max_num_tokens > 0)
        assert r.launch.max_running >= 0
        assert r.launch.dp_balance_iters is None or r.launch.dp_balance_iters >= 0
        if r.prefill is not None:  # launch settings: aggregated rows only
            assert (r.launch.batch_wait_iters, r.launch.max_running) == (0, 0)
        assert r.draft == 0 or (r.spec == "mtp" and 1 <= r.draft <= 8)
        assert (r.prefill is None) == (r.decode is None)
        for p in (r.prefill, r.decode):
            if p is not None:
                assert p.workers >= 1
                assert p.gpus % p.ep == 0


def test_the_recipes_name_corpus_rows(calibration_dir: Path) -> None:
    """Every id of the table is a row of the corpus, disaggregated where the table gives pools and aggregated where
    it does not; the listed rows carry their spec after loading."""
    rows = {r.id: r for r in load_corpus(calibration_dir / "silicon_dev.csv")}
    table = recipes()
    assert set(table) <= set(rows)
    assert all(rows[i].mode == ("agg" if table[i].prefill is None else "disagg") for i in table)
    assert all(rows[i].spec == table[i].spec for i in table)
    assert sum(r.workers == "recipe" for r in rows.values()) > 300
    assert sum(r.mode == "agg" and r.spec_draft > 0 for r in rows.values()) > 100
    # the launch scripts' batch waiting: Llama-3.1-70B with TensorRT-LLM at 1k/1k below TP 8, in its sim flags too
    waiting = [r for r in rows.values() if r.launch.batch_wait_iters]
    assert all(r.engine == "trtllm" and r.mode == "agg" for r in waiting)
    llama = [r for r in waiting if "70B" in r.model]
    assert len(llama) == 54
    assert all(
        (r.isl, r.osl, r.launch.batch_wait_iters, r.launch.max_num_tokens) == (1024, 1024, 20, 16384) for r in llama
    )
    assert all(r.agg is not None and r.agg.tp < 8 for r in llama)
    flags = llama[0].sim_flags()
    assert flags[flags.index("--batch-wait-iters") + 1] == "20"
    assert flags[flags.index("--max-num-batched-tokens") + 1] == "16384"
    # the running requests the launch scripts allow (SGLang's and vLLM's), in the sim flags too
    # TensorRT-LLM's attention-DP balancing where the launch script enables it: InferenceX's DeepSeek-R1 scripts under
    # attention DP (60 iterations)
    balancing = [r for r in rows.values() if r.launch.dp_balance_iters is not None]
    assert all(r.engine == "trtllm" and r.mode == "agg" for r in balancing)
    assert {r.launch.dp_balance_iters for r in balancing} == {60}
    assert all("DeepSeek" in r.model for r in balancing)
    assert len([r for r in balancing if r.launch.dp_balance_iters == 60]) > 60
    capped = [r for r in rows.values() if r.launch.max_running]
    assert len(capped) > 700
    assert {r.engine for r in capped} == {"sglang", "vllm"}
    flags = capped[0].sim_flags()
    assert flags[flags.index("--max-num-seqs") + 1] == str(capped[0].launch.max_running)
    # SGLang's receive interval is recorded in the table, not given to the rows: the B200 scripts set 10, or 30 from
    # 16 clients on; none is set on H200
    with RECIPES.open(encoding="utf-8") as f:
        receiving = [(rows[t["id"]], int(t["recv_interval"])) for t in csv.DictReader(f) if t["recv_interval"]]
    assert len(receiving) > 250
    assert all(r.engine == "sglang" and r.system == "b200_sxm" for r, _ in receiving)
    assert {n for _, n in receiving} == {10, 30}
    assert all(n == 10 for r, n in receiving if r.concurrency < 16)


def test_launch_settings_give_flags_and_keywords_for_what_was_set() -> None:
    """One value carries a launch script's settings to the row's ``sim`` flags and ``tailscope.simulate``
    keywords: only what was set, integers as integers."""
    from tailscope.engine.launch import NOT_SET, LaunchSettings

    assert NOT_SET.sim_flags() == []
    assert NOT_SET.simulate_options() == {}
    s = LaunchSettings.parse({"batch_wait_iters": "20", "batch_wait_ratio": "0.9", "max_num_tokens": "16384"})
    assert s.sim_flags() == [
        "--batch-wait-iters",
        "20",
        "--batch-wait-ratio",
        "0.9",
        "--max-num-batched-tokens",
        "16384",
    ]
    assert s.simulate_options() == {"batch_wait_iters": 20, "batch_wait_ratio": 0.9, "max_num_batched_tokens": 16384}
    assert LaunchSettings.parse({"max_running": "128", "batch_wait_iters": ""}).sim_flags() == ["--max-num-seqs", "128"]
    # a balancing of 0 says the script turned it off; not known (None) says nothing
    off = LaunchSettings.parse({"dp_balance_iters": "0"})
    assert off.sim_flags() == ["--attention-dp-balance-iters", "0"]
    assert off.simulate_options() == {"dp_balance_iters": 0}
    assert LaunchSettings.parse({"dp_balance_iters": ""}).dp_balance_iters is None
