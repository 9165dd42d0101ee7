"""A shortened soak: ``tailscope serve`` and ``tailscope bench --stream-records`` at a modest steady rate for about a
minute and a quarter, RSS and open file descriptors of both sampled every second (``benchmarks/soak.py``, the hour
long version, has the method).

After a warm-up the client's resident memory must stay flat (records go to the store, not to a list) and neither
process may keep file descriptors. The memory judgement needs a machine that is not oversubscribed: when the load
average exceeds the CPU count it is skipped with the figures measured, rather than flake.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DURATION_S = float(os.environ.get("TAILSCOPE_SOAK_S", "75"))
WARMUP_S = 20.0
#: the client's RSS may grow this much between the warm-up's end and the run's end (MB): allocator noise, the
#: writer's batches in flight — not a per-request leak (that would be ≥ 1 KB × thousands of requests)
CLIENT_GROWTH_MB = 6.0
SERVER_GROWTH_MB = 12.0


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_bench", REPO / "benchmarks" / "soak.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(int(DURATION_S) + 120)
def test_soak_memory_is_flat_and_no_descriptor_leaks(tmp_path: Path) -> None:
    soak = _soak_module()
    res = soak.soak(DURATION_S, 6.0, 64, 64, 1.0, WARMUP_S, tmp_path)
    assert res["requests_ok"] >= 0.9 * 6.0 * DURATION_S
    assert res["requests_failed"] == 0
    client, server = res["client"], res["server"]
    # descriptors: the pool's connections, the store, the journal — a constant set, whatever the load did
    assert client["fds_max"] - client["fds_first"] <= 8, client
    assert server["fds_max"] - server["fds_first"] <= 8, server
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    if load > cpus:
        pytest.skip(
            f"memory judgement skipped: load average {load:.1f} > {cpus} CPUs (measured: client growth "
            f"{client['growth_mb']} MB, server {server['growth_mb']} MB after warm-up)"
        )
    assert client["growth_mb"] <= CLIENT_GROWTH_MB, client
    assert server["growth_mb"] <= SERVER_GROWTH_MB, server


def test_soak_series_judgement() -> None:
    soak = _soak_module()
    s = soak.Series()
    for i in range(30):
        s.t.append(float(i))
        s.rss.append(100.0 + 0.01 * i)  # 36 MB/h
        s.fds.append(20)
    j = s.judge(5.0)
    assert j["slope_mb_per_h"] == pytest.approx(36.0, abs=0.5)
    assert j["growth_mb"] == pytest.approx(0.2, abs=0.05)
    assert j["fds_max"] == 20
    assert statistics.mean(s.rss) > 100
