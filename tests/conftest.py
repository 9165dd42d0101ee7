"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _find_calibration_dir() -> Path | None:
    env = os.environ.get("TAILSCOPE_CALIBRATION_DIR")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in Path(__file__).resolve().parents:
        cand = parent / "shared" / "calibration"
        if cand.is_dir():
            return cand
    return None


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    """``shared/calibration`` next to this checkout or one of its parents (``TAILSCOPE_CALIBRATION_DIR`` points
    elsewhere). The corpus and model configs are not in the repository: tests that need them skip without them."""
    found = _find_calibration_dir()
    if found is None:
        pytest.skip("shared/calibration (silicon_dev.csv, model_configs) is not next to this checkout")
    return found


#: judgements a test could not make on a busy or noisy machine, printed in the run's summary
_NOT_JUDGED: list[str] = []


class Judgement:
    """What a timing test says when the machine cannot support its judgement.

    A test that measures latency on a shared 2-core machine keeps its structural checks; the part that compares
    timings runs only when :meth:`quiet` holds, and otherwise :meth:`cannot_judge` records why, with the figures, so
    the run's summary says so (``not judged on this machine``) instead of the test failing or silently passing.
    """

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    @staticmethod
    def load() -> tuple[float, int]:
        return os.getloadavg()[0], os.cpu_count() or 1

    def quiet(self, share: float = 0.75) -> bool:
        """The 1-minute load average is at most ``share`` × the CPUs."""
        load, cpus = self.load()
        return load <= cpus * share

    def cannot_judge(self, why: str) -> None:
        load, cpus = self.load()
        _NOT_JUDGED.append(f"{self.nodeid}: {why} (load {load:.1f} on {cpus} CPUs)")


@pytest.fixture
def judgement(request: pytest.FixtureRequest) -> Judgement:
    return Judgement(request.node.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _NOT_JUDGED:
        terminalreporter.section("not judged on this machine (busy or noisy): figures, not verdicts")
        for line in _NOT_JUDGED:
            terminalreporter.write_line(line)
