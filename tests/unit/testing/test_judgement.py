"""A timing is judged only on a quiet machine: the load average and, where Linux reports it, the CPU pressure of the
last 10 s at the test's start and at the judgement (the load average lags a suite that has just started)."""

from __future__ import annotations

import pytest

import tailscope.testing.judgement as jm


def _judgement(monkeypatch: pytest.MonkeyPatch, load: float, start: float | None, now: float | None) -> jm.Judgement:
    monkeypatch.setattr(jm.Judgement, "load", staticmethod(lambda: (load, 2)))
    monkeypatch.setattr(jm, "cpu_pressure", lambda: start)
    j = jm.Judgement("t::x")
    monkeypatch.setattr(jm, "cpu_pressure", lambda: now)
    return j


@pytest.mark.parametrize(
    ("load", "start", "now", "quiet"),
    [
        (0.5, 1.0, 2.0, True),
        (0.5, None, None, True),  # no PSI (older kernels, other systems): the load average alone
        (2.5, 0.0, 0.0, False),
        (0.5, 45.0, 0.0, False),  # busy when the test started: the 1-minute average had not caught up
        (0.5, 0.0, 30.0, False),
    ],
)
def test_quiet_needs_a_low_load_and_low_cpu_pressure(
    monkeypatch: pytest.MonkeyPatch, load: float, start: float | None, now: float | None, quiet: bool
) -> None:
    assert _judgement(monkeypatch, load, start, now).quiet() is quiet


def test_a_failed_timing_fails_only_when_quiet_and_is_reported_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jm, "NOT_JUDGED", [])
    _judgement(monkeypatch, 0.5, 40.0, 5.0).holds(False, "took 9 ms")
    assert jm.NOT_JUDGED == ["t::x: took 9 ms (load 0.5 on 2 CPUs, CPU pressure 40 %)"]
    with pytest.raises(AssertionError, match="took 9 ms"):
        _judgement(monkeypatch, 0.5, 1.0, 1.0).holds(False, "took 9 ms")


def test_cpu_pressure_reads_the_kernels_figure_or_none() -> None:
    p = jm.cpu_pressure()
    assert p is None or 0.0 <= p <= 100.0
