"""Runs over time: change points of per-run series (robust steps) and the trend built from run summaries."""

from __future__ import annotations

import random

import pytest

from tailscope.metrics.trend import build_trend, change_points


def test_a_step_beyond_the_noise_is_found_where_it_starts() -> None:
    rng = random.Random(1)
    values = [100 + rng.gauss(0, 2) for _ in range(8)] + [130 + rng.gauss(0, 2) for _ in range(8)]
    found = change_points(values)
    assert [k for k, *_ in found] == [8]
    _, before, after, z = found[0]
    assert before == pytest.approx(100, abs=3)
    assert after == pytest.approx(130, abs=3)
    assert z > 4


def test_noise_and_a_single_odd_run_are_not_steps() -> None:
    rng = random.Random(2)
    assert change_points([100 + rng.gauss(0, 5) for _ in range(30)]) == []
    assert change_points([10, 10.1, 9.9, 30, 10, 10.2, 9.8, 10]) == []  # one outlier: the medians do not move
    assert change_points([10, 11, 10.5]) == []  # too few runs for two segments of two


def test_two_steps_and_a_small_step_under_the_relative_floor() -> None:
    values = [50.0] * 5 + [80.0] * 5 + [40.0] * 5
    assert [k for k, *_ in change_points(values)] == [5, 10]
    assert change_points([100.0] * 5 + [102.0] * 5) == []  # +2 %: under the 5 % floor even with no noise


def _run(i: int, day: int, ttft: float, tpot: float, tags: tuple[str, ...] = ("main",)) -> dict[str, object]:
    return {
        "id": f"run{i:02d}",
        "started_at": f"2026-11-{day:02d}T10:{i:02d}:00.000Z",
        "kind": "bench",
        "tags": tags,
        "summary": {
            "ttft_ms": {"p50": ttft, "p99": ttft * 3},
            "tpot_ms": {"p50": tpot, "p99": tpot * 2},
            "input_tokens": {"mean": 500.0},
            "output_tokens": {"mean": 200.0},
            "requests": {"completed": 100},
        },
    }


def test_trend_orders_runs_marks_steps_and_sums_tokens_per_day() -> None:
    runs = [_run(i, 1 + i // 3, 200 + (i % 2), 20.0 if i < 6 else 26.0) for i in range(12)]
    trend = build_trend(list(reversed(runs)), {"tag": "main"})
    assert [p.run_id for p in trend.points] == [f"run{i:02d}" for i in range(12)]
    assert {c.series for c in trend.change_points} == {"tpot_ms.p50", "tpot_ms.p99"}
    step = next(c for c in trend.change_points if c.series == "tpot_ms.p50")
    assert step.run_id == "run06"
    assert step.relative == pytest.approx(0.3)
    assert "tpot_ms.p50" in trend.points[6].changes
    assert [d.day for d in trend.daily] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert trend.daily[0].total_tokens == pytest.approx(3 * 100 * 700)
    doc = trend.to_dict()
    assert doc["runs"][0]["ttft_ms.p50"] == 200
    assert doc["change_points"][0]["run_id"] == "run06"
    assert "binary segmentation" in doc["method"]
