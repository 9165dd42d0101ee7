"""twin check's pure parts: the median over repeats, the anchor's rescaling of the twin, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailscope.engine.calibration import load_calibration
from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel
from tailscope.errors import ConfigError
from tailscope.runner.twin_check import anchored_calibration, median_summary, predicted_anchor_ms, scaled

TWIN = TwinModel(
    coefficients=TwinCoefficients(4000, 300, 0.5, 20, 0.01, 10_000, 0),
    stderr=TwinCoefficients(100, 10, 0.05, 1, 0.001, 500, 0),
    facts=ServerFacts(block_size=128, num_blocks=128, max_num_seqs=64, max_num_batched_tokens=2048),
)


def write(tmp_path: Path, twin: TwinModel) -> Path:
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(twin.to_mapping()))
    return path


def test_median_summary_takes_each_percentile_separately() -> None:
    runs = [
        {"ttft_ms": {"p50": 10.0, "p90": 30.0}, "tpot_ms": {"p50": 5.0}, "output_tokens_per_s": 100.0},
        {"ttft_ms": {"p50": 12.0, "p90": 20.0}, "tpot_ms": {"p50": 7.0}, "output_tokens_per_s": 90.0},
        {"ttft_ms": {"p50": 50.0, "p90": 25.0}, "tpot_ms": {"p50": 6.0}, "output_tokens_per_s": 95.0},
    ]
    m = median_summary(runs)
    assert m["ttft_ms"] == {"p50": 12.0, "p90": 25.0}
    assert m["tpot_ms"] == {"p50": 6.0}
    assert m["output_tokens_per_s"] == 95.0
    assert median_summary(runs[:2])["ttft_ms"]["p50"] == 11.0


def test_scaled_moves_only_the_decode_path() -> None:
    s = scaled(TWIN, 1.5)
    c = s.coefficients
    assert (c.step_overhead_us, c.per_seq_us, c.per_kv_token_us) == pytest.approx((6000, 450, 0.75))
    assert (c.prefill_per_token_us, c.frontend_us) == pytest.approx((20, 10_000))
    assert s.stderr.step_overhead_us == pytest.approx(150)
    assert s.fitted_on["anchor_decode_factor"] == 1.5


def test_anchor_that_matches_the_twin_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, TWIN)
    _, tpot = predicted_anchor_ms(path)
    out, decode = anchored_calibration(path, [tpot, tpot], tmp_path)
    assert decode == pytest.approx(1.0)
    twin = load_calibration(out).twin
    assert twin is not None
    assert twin.coefficients.step_overhead_us == pytest.approx(4000)


def test_anchor_on_a_slower_server_scales_the_twin_up(tmp_path: Path) -> None:
    path = write(tmp_path, TWIN)
    _, tpot = predicted_anchor_ms(path)
    out, decode = anchored_calibration(path, [tpot * 1.3, tpot * 1.5], tmp_path)
    assert decode == pytest.approx(1.4)
    assert predicted_anchor_ms(out)[1] == pytest.approx(tpot * 1.4, rel=0.05)  # the rescaled twin reproduces it


def test_anchor_without_measurements_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="drop --anchor"):
        anchored_calibration(write(tmp_path, TWIN), [0.0], tmp_path)


def test_anchor_compares_the_server_with_its_own_reference_when_the_twin_has_one(tmp_path: Path) -> None:
    from dataclasses import replace

    path = write(tmp_path, replace(TWIN, fitted_on={"anchor_tpot_ms": 5.0}))
    _, decode = anchored_calibration(path, [6.0, 7.0], tmp_path)
    assert decode == pytest.approx(1.3)  # (6 + 7) / 2 ÷ 5, whatever the model says about the anchor stream
