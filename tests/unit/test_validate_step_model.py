"""tailscope.validate_step_model: cross-validation of the step model on (a slice of) the calibration corpus."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest

import tailscope


def _slice(calibration_dir: Path, out: Path) -> Path:
    """Three aggregated configurations and one disaggregated one of silicon_dev.csv (a few dozen rows)."""
    with (calibration_dir / "silicon_dev.csv").open(encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    head = table[0]
    cols = [head.index(c) for c in ("model_path", "system", "backend", "precision", "mode")]
    groups: dict[tuple[str, ...], list[list[str]]] = defaultdict(list)
    for row in table[1:]:
        groups[tuple(row[i] for i in cols)].append(row)
    small = sorted((k for k in groups if len(groups[k]) >= 6), key=lambda k: (len(groups[k]), k))
    keys = [k for k in small if k[4] == "agg"][:3] + [k for k in small if k[4] == "disagg"][:1]
    path = out / "slice.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for k in keys:
            w.writerows(groups[k])
    return path


def test_every_held_out_row_is_predicted(calibration_dir: Path, tmp_path: Path) -> None:
    corpus = _slice(calibration_dir, tmp_path)
    seen: list[tuple[int, int]] = []
    v = tailscope.validate_step_model(
        corpus, folds=2, baseline=True, progress=lambda d, n, rows, s: seen.append((d, n))
    )
    assert isinstance(v, tailscope.StepModelValidation)
    assert (v.folds, v.folds_run, seen) == ("2", 2, [(1, 2), (2, 2)])
    assert len({r.configuration for r in v.rows}) == 4
    for r in v.rows:
        assert (r.predicted_ttft_ms or 0) > 0, r.id
        assert (r.predicted_tpot_ms or 0) > 0, r.id
        # the roofline baseline exists for aggregated rows only; the simulate() keywords for every row, a
        # disaggregated one's pools as `disagg`
        assert (r.baseline_ttft_ms is not None) == (r.mode == "agg")
        assert r.simulate_options is not None
        assert ("disagg" in r.simulate_options) == (r.mode == "disagg")
    ttft, tpot = v.mape()
    assert 0 < ttft < 10
    assert 0 < tpot < 10
    assert not math.isnan(v.mape("baseline", mode="agg")[0])
    assert math.isnan(v.mape("baseline", mode="disagg")[0])
    agg = next(r for r in v.rows if r.mode == "agg" and r.concurrency <= 16)
    assert agg.simulate_options is not None
    # the KV memory the analysis sizes admission by (and the rows' `sim` flags), not simulate()'s default
    from tailscope.engine.fit import corpus_kv_fraction

    assert agg.simulate_options["gpu_memory_utilization"] == corpus_kv_fraction(agg.engine)
    sim = tailscope.simulate(**agg.simulate_options, requests=agg.concurrency * 2)
    assert sim.summary.requests.completed == agg.concurrency * 2


def test_max_folds_leaves_the_other_rows_unpredicted(calibration_dir: Path, tmp_path: Path) -> None:
    v = tailscope.validate_step_model(_slice(calibration_dir, tmp_path), folds=2, max_folds=1)
    assert v.folds_run == 1
    predicted = {r.predicted_ttft_ms is not None for r in v.rows}
    assert predicted == {True, False}
    assert all(r.baseline_ttft_ms is None for r in v.rows)  # no baseline unless asked


@pytest.mark.parametrize(("kw", "message"), [({"folds": "x"}, "folds must be"), ({"jobs": 0}, "jobs must be")])
def test_bad_options_are_refused(kw: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(tailscope.ConfigError, match=message):
        tailscope.validate_step_model(tmp_path / "none.csv", **kw)  # type: ignore[arg-type]


def test_a_missing_corpus_is_named(tmp_path: Path) -> None:
    with pytest.raises(tailscope.ConfigError, match=r"none\.csv"):
        tailscope.validate_step_model(tmp_path / "none.csv")


_HEAD = (
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
    "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
    "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
    "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,"
    "decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms"
).split(",")


def _agg_row(row_id: str, version: str, concurrency: int, ttft: float, tpot: float) -> dict[str, object]:
    return {
        "id": row_id, "silicon_data_source": f"test; silicon_concurrency={concurrency}", "backend": "vllm",
        "backend_version": version, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
        "mode": "agg", "isl": 1024, "osl": 128, "batch_size": concurrency, "tp_size": 1, "pp_size": 1,
        "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot,
    }  # fmt: skip


def test_measurement_repeatability_predicts_each_repeat_from_the_others(tmp_path: Path) -> None:
    rows = [
        _agg_row("a1", "0.1", 8, 100.0, 10.0),
        _agg_row("a1-copy", "0.1", 8, 100.0000000001, 10.0),  # the export's copy of a1: counts once
        _agg_row("a2", "0.1", 8, 125.0, 10.0),  # a repeat of a1 in the same version
        _agg_row("b1", "0.2", 8, 200.0, 20.0),  # the same setup in another version
        _agg_row("c1", "0.1", 16, 150.0, 12.0),  # another workload: measured once
    ]
    path = tmp_path / "corpus.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_HEAD)
        w.writeheader()
        w.writerows(rows)
    got = {(r.mode, r.same_version): r for r in tailscope.measurement_repeatability(path)}
    same = got[("agg", True)]
    assert (same.groups, same.measurements) == (1, 2)
    assert sorted(same.row_ids) == ["a1", "a1-copy", "a2"]
    assert same.ttft_mape == pytest.approx((0.25 + 0.2) / 2)  # 125/100 − 1 and 1 − 100/125
    assert same.tpot_mape == 0.0
    across = got[("agg", False)]
    assert (across.groups, across.measurements) == (1, 3)
    # each of 100, 125, 200 ms predicted by the median of the other two
    assert across.ttft_mape == pytest.approx((162.5 / 100 - 1 + 150 / 125 - 1 + 1 - 112.5 / 200) / 3)
    nothing = got[("disagg", True)]
    assert (nothing.groups, nothing.measurements) == (0, 0)
    assert math.isnan(nothing.ttft_mape)
    with pytest.raises(tailscope.ConfigError):
        tailscope.measurement_repeatability(tmp_path / "none.csv")
