"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.testing import calibration
from tailscope.testing.judgement import FAILED_ON_A_QUIET_MACHINE, NOT_JUDGED, Judgement


@pytest.fixture(scope="session")
def calibration_dir() -> Path:
    """``shared/calibration`` next to this checkout or one of its parents (``TAILSCOPE_CALIBRATION_DIR`` points
    elsewhere). The corpus and model configs are not in the repository: tests that need them skip without them."""
    found = calibration.calibration_dir(__file__)
    if found is None:
        pytest.skip("shared/calibration (silicon_dev.csv, model_configs) is not next to this checkout")
    return found


@pytest.fixture
def judgement(request: pytest.FixtureRequest) -> Judgement:
    """What a timing test says when the machine cannot support its judgement (see ``tailscope.testing.judgement``)."""
    return Judgement(request.node.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if NOT_JUDGED:
        terminalreporter.section("not judged on this machine (busy or noisy): figures, not verdicts")
        for line in NOT_JUDGED:
            terminalreporter.write_line(line)
    if FAILED_ON_A_QUIET_MACHINE:
        terminalreporter.section("timings that failed on a machine read as quiet (each measured once more: see RERUN)")
        for line in FAILED_ON_A_QUIET_MACHINE:
            terminalreporter.write_line(line)
