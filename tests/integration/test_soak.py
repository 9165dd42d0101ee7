"""A shortened soak: ``tailscope serve`` and ``tailscope bench --stream-records`` at a modest steady rate, RSS and open
file descriptors of both sampled every second (``benchmarks/soak.py``, the hour-long version, has the method).

``make check`` runs it for ten minutes (``TAILSCOPE_SOAK_S=600``) in a second pytest process beside the rest of the
suite, so the machine is busy throughout, as the issue asks; a plain ``pytest`` runs it for 75 s. After a warm-up the
client's resident memory must stay flat (records go to the store, not to a list) and neither process may keep file
descriptors. Growth is the median RSS of the last minute minus that of the first minute after warm-up (one sample's
allocator noise is not growth). The ten-minute run judges memory on any machine — a backlog on a busy machine must stay
bounded too; the 75 s one is too short to tell a backlog from a leak and judges only when the machine is quiet.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tailscope.testing.judgement import Judgement

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


#: from this duration on memory is judged whatever the machine's load
JUDGED_ANYWHERE_S = 600.0


@pytest.mark.soak
@pytest.mark.timeout(int(DURATION_S) + 120)
def test_soak_memory_is_flat_and_no_descriptor_leaks(tmp_path: Path, judgement: Judgement) -> None:
    soak = _soak_module()
    res = soak.soak(DURATION_S, 6.0, 64, 64, 1.0, WARMUP_S, tmp_path)
    assert res["requests_ok"] >= 0.9 * 6.0 * DURATION_S
    assert res["requests_failed"] == 0
    client, server = res["client"], res["server"]
    # descriptors: the pool's connections, the store, the journal — a constant set, whatever the load did
    assert client["fds_max"] - client["fds_first"] <= 8, client
    assert server["fds_max"] - server["fds_first"] <= 8, server
    print(f"\nsoak {DURATION_S:.0f} s: client {client}\nserver {server}")
    bounded = client["settled_growth_mb"] <= CLIENT_GROWTH_MB and server["settled_growth_mb"] <= SERVER_GROWTH_MB
    if not bounded and DURATION_S < JUDGED_ANYWHERE_S and not judgement.quiet():
        judgement.cannot_judge(
            f"{DURATION_S:.0f} s soak memory: client growth {client['settled_growth_mb']} MB, server "
            f"{server['settled_growth_mb']} MB after warm-up"
        )
        return
    assert client["settled_growth_mb"] <= CLIENT_GROWTH_MB, client
    assert server["settled_growth_mb"] <= SERVER_GROWTH_MB, server


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
