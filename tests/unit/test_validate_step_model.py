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
        # the roofline baseline and the simulate() keywords exist for aggregated rows only
        assert (r.baseline_ttft_ms is not None) == (r.mode == "agg") == (r.simulate_options is not None)
    ttft, tpot = v.mape()
    assert 0 < ttft < 10
    assert 0 < tpot < 10
    assert not math.isnan(v.mape("baseline", mode="agg")[0])
    assert math.isnan(v.mape("baseline", mode="disagg")[0])
    agg = next(r for r in v.rows if r.simulate_options is not None and r.concurrency <= 16)
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
