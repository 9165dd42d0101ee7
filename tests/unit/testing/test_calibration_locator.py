"""The calibration corpus's locator: the environment variable wins; else the nearest ``shared/calibration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.testing.calibration import ENV, calibration_dir, find_corpus


def test_nearest_shared_calibration_above_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    folder = tmp_path / "shared" / "calibration"
    folder.mkdir(parents=True)
    script = tmp_path / "checkout" / "scripts" / "fit.py"
    script.parent.mkdir(parents=True)
    script.write_text("")
    assert calibration_dir(script) == folder
    assert find_corpus(script) is None  # the folder without its corpus
    (folder / "silicon_dev.csv").write_text("id\n")
    assert find_corpus(script) == folder / "silicon_dev.csv"


def test_the_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shared" / "calibration").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv(ENV, str(elsewhere))
    assert calibration_dir(tmp_path) == elsewhere
    monkeypatch.setenv(ENV, str(tmp_path / "missing"))
    assert calibration_dir(tmp_path) is None
