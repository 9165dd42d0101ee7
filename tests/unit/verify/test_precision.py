"""Precision of a pooled percentile, the --until-precise target, and the spread of repeated runs."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.errors import ConfigError
from tailscope.records import RequestRecord, Status
from tailscope.verify.precision import across_runs, parse_precision, precision_of


def recs(ttfts_ms: np.ndarray) -> list[RequestRecord]:
    out = []
    for i, v in enumerate(ttfts_ms):
        first = int(v * 1e6)
        end = first + 1_000_000
        out.append(RequestRecord(i, 0, 0, first, end, Status.OK, chunk_times_ns=(first, end), chunk_tokens=(1, 1),
                                 output_tokens=2))  # fmt: skip
    return out


def test_parse_precision_targets() -> None:
    t = parse_precision("ttft_ms.p99=5%")
    assert (t.metric, t.stat, t.rel_half_width) == ("ttft_ms", "p99", 0.05)
    assert parse_precision("e2e_ms.median=2.5%").stat == "p50"
    for bad in ("ttft.p99=5", "goodput.p99=5%", "ttft_ms.p99=0%", "ttft_ms.p42x=5%"):
        with pytest.raises(ConfigError, match="--until-precise"):
            parse_precision(bad)


def test_more_samples_narrow_the_interval_until_the_target_is_met() -> None:
    rng = np.random.default_rng(3)
    target = parse_precision("ttft_ms.p90=3%")
    small = precision_of(recs(rng.lognormal(4, 0.5, 60)), target)
    large = precision_of(recs(rng.lognormal(4, 0.5, 6000)), target)
    assert small.rel_half_width is not None
    assert large.rel_half_width is not None
    assert large.rel_half_width < small.rel_half_width
    assert not small.met
    assert large.met
    assert large.low is not None
    assert large.high is not None
    assert large.low <= (large.estimate or 0) <= large.high


def test_across_runs_spread() -> None:
    runs = [{"ttft_ms": {"p99": v}, "output_tokens_per_s": t} for v, t in ((100.0, 10.0), (140.0, 12.0), (120.0, 11.0))]
    a = across_runs(runs)
    assert a["ttft_ms.p99"] == {"median": 120.0, "min": 100.0, "max": 140.0}
    assert a["output_tokens_per_s"]["median"] == 11.0
    assert a["tpot_ms.p50"]["median"] is None
