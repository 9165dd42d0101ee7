"""The collector during a load: the set-up is frozen before the first send and thawed after the run."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import tailscope
from tailscope.runner import bench as bench_mod
from tailscope.runner.gc_window import freeze_setup, thaw


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    enabled = gc.isenabled()
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_freeze_moves_the_set_up_out_of_the_collectors_reach_and_thaw_undoes_it() -> None:
    tracked = len(gc.get_objects())
    assert freeze_setup() is True
    assert gc.get_freeze_count() > 0
    assert len(gc.get_objects()) < tracked  # what the collector still scans: only what came after the freeze
    thaw(True)
    assert gc.get_freeze_count() == 0


def test_a_freeze_that_is_not_ours_is_left_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert freeze_setup() is False
    thaw(False)
    assert gc.get_freeze_count() == frozen


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    assert freeze_setup() is False
    assert gc.get_freeze_count() == 0


def test_a_bench_freezes_its_set_up_for_the_load_and_thaws_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def spy() -> bool:
        froze = freeze_setup()
        seen.append(gc.get_freeze_count())
        return froze

    monkeypatch.setattr(bench_mod, "freeze_setup", spy)
    res = tailscope.bench(requests=2, concurrency=1, input_tokens=8, output_tokens=4)
    assert res.summary.requests.completed == 2
    assert len(seen) == 1
    assert seen[0] > 0  # frozen while the load ran
    assert gc.get_freeze_count() == 0  # and thawed after it
