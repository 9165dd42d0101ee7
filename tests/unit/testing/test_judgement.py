"""A timing is judged only on a quiet machine: the load average and, where Linux reports it, the CPU pressure of the
last 10 s at the test's start and at the judgement (the load average lags a suite that has just started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    monkeypatch.setattr(jm, "FAILED_ON_A_QUIET_MACHINE", [])
    _judgement(monkeypatch, 0.5, 40.0, 5.0).holds(False, "took 9 ms")
    assert jm.NOT_JUDGED == ["t::x: took 9 ms (load 0.5 on 2 CPUs, CPU pressure 40 %)"]
    with pytest.raises(AssertionError, match="took 9 ms"):
        _judgement(monkeypatch, 0.5, 1.0, 1.0).holds(False, "took 9 ms")


def test_cpu_pressure_reads_the_kernels_figure_or_none() -> None:
    p = jm.cpu_pressure()
    assert p is None or 0.0 <= p <= 100.0


def test_a_timing_failed_on_a_quiet_machine_is_listed_and_raised_as_timing_not_met(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jm, "FAILED_ON_A_QUIET_MACHINE", [])
    with pytest.raises(jm.TimingNotMet, match=r"took 9 ms \(on a quiet machine\)") as info:
        _judgement(monkeypatch, 0.5, 1.0, 1.0).holds(False, "took 9 ms")
    assert isinstance(info.value, AssertionError)
    assert jm.FAILED_ON_A_QUIET_MACHINE == ["t::x: took 9 ms (load 0.5 on 2 CPUs, CPU pressure 1 %)"]


RERUN_SUITE = """
import pathlib

from tailscope.testing.judgement import Judgement

TRIES = pathlib.Path(__file__).with_name("tries.txt")


def _try() -> int:
    n = int(TRIES.read_text()) + 1 if TRIES.exists() else 1
    TRIES.write_text(str(n))
    return n


def test_timing_met_at_the_second_sample() -> None:
    j = Judgement("timing")
    j.quiet = lambda share=1.0: True
    j.holds(_try() > 1, "took 9 ms")


def test_plain_assertion_is_never_rerun() -> None:
    assert False, "a wrong count"
"""


def test_the_suite_measures_a_failed_timing_once_more_and_nothing_else(tmp_path: Path) -> None:
    """pyproject.toml's pytest settings: TimingNotMet is rerun once (it passes at its second sample here); a plain
    assertion fails at once."""
    root = Path(__file__).resolve().parents[3]
    work = tmp_path
    (work / "test_rerun_probe.py").write_text(RERUN_SUITE)
    args = ["-q", "-p", "no:cacheprovider", "-c", str(root / "pyproject.toml"), "--rootdir", str(work)]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(work / "test_rerun_probe.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=work,
    )
    out = proc.stdout + proc.stderr
    assert "1 failed, 1 passed, 1 rerun" in out, out
    assert (work / "tries.txt").read_text() == "2"
    assert "RERUN test_rerun_probe.py::test_timing_met_at_the_second_sample" in out, out
