"""``whatif --rank``: each candidate kind proposed when its finding is in the set (and only then), projected to the
same saving as the what-if of that change alone (the same engine, :func:`tailscope.trace.whatif.project`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trace_helpers import span

import tailscope
from tailscope.records import Span
from tailscope.store.spans import SpanStore
from tailscope.trace.changes import parse_change
from tailscope.trace.dependency import Evidence
from tailscope.trace.rank import rank, set_facts_with_marks
from tailscope.trace.tree import TraceTree, build_tree
from tailscope.trace.whatif import project

MS = 1_000_000
N = 60


def _gateway(
    trace: str, *, auth_ms: float, llm_ms: float, extra: Callable[[int], list[Span]] | None = None
) -> list[Span]:
    """``POST /chat`` (SERVER, gateway) → ``auth`` (a leaf in the gateway's service) then ``llm`` (the engine);
    ``extra(t)`` adds children of the root from ``t`` (ns) on, after the llm call."""
    auth, llm = round(auth_ms * MS), round(llm_ms * MS)
    kids = [
        span("auth", "root", MS, MS + auth, trace=trace, service="gw"),
        span("llm", "root", 2 * MS + auth, 2 * MS + auth + llm, trace=trace, service="engine", layer="inference"),
    ]
    t = 3 * MS + auth + llm
    more = extra(t) if extra else []
    end = max([t, *(s.end_ns for s in more)]) + MS
    return [span("root", None, 0, end, "POST /chat", trace=trace, service="gw", kind="SERVER", layer="gateway"),
            *kids, *more]  # fmt: skip


def _trees(make: Callable[[int, random.Random], list[Span]], n: int = N) -> list[TraceTree]:
    rng = random.Random(7)
    return [build_tree(make(k, rng)) for k in range(n)]


def _rank(trees: list[TraceTree]) -> dict[str, Any]:
    ev = Evidence()
    for t in trees:
        ev.add(t)
    return rank(trees, set_facts_with_marks(trees, {}), ev)


def _alone_saving_ms(trees: list[TraceTree], flag: str) -> float:
    """The P95 saving (ms) of the what-if of one change given as its flag (``--kind "value"``)."""
    kind, _, value = flag.partition(" ")
    proj = project(trees, [parse_change(kind.removeprefix("--"), value.strip('"'))])
    return float(proj.summary(resamples=0)["saving"]["p95_ms"])


def _of(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in doc["candidates"] if c["kind"] == kind]


def _check_alone(trees: list[TraceTree], c: dict[str, Any]) -> None:
    assert c["p95_saving_ms"] > 0
    assert c["p95_saving_ms"] == pytest.approx(_alone_saving_ms(trees, c["change"]), abs=0.002)


# ------------------------------------------------------------------------------------------------ shorten-sync


def _sync_set(auth_ms: float) -> list[TraceTree]:
    return _trees(lambda k, r: _gateway(f"t{k}", auth_ms=auth_ms * r.uniform(0.8, 1.2), llm_ms=r.uniform(50, 150)))


def test_shorten_sync_proposed_for_a_slow_synchronous_step() -> None:
    trees = _sync_set(40.0)
    doc = _rank(trees)
    sync = _of(doc, "shorten-sync")
    assert [c["change"] for c in sync] == ['--set-duration "auth=5ms"']
    assert "synchronous gateway step" in sync[0]["evidence"]
    _check_alone(trees, sync[0])
    assert sync[0]["p95_saving_ms"] == pytest.approx(35.0, abs=10.0)  # auth 40 ms ± 20 % → 5 ms


def test_shorten_sync_not_proposed_for_a_quick_step_or_the_engine() -> None:
    doc = _rank(_sync_set(8.0))  # below SYNC_MIN_MS
    assert not _of(doc, "shorten-sync")
    # a slow leaf of another service (the engine) is not a gateway step either
    assert all("llm" not in c["operations"] for c in _of(_rank(_sync_set(40.0)), "shorten-sync"))


def test_shorten_sync_not_proposed_for_tool_calls_in_the_gateways_own_service() -> None:
    def make(k: int, r: random.Random) -> list[Span]:
        tid = f"t{k}"
        spans = _gateway(tid, auth_ms=40, llm_ms=r.uniform(50, 150), extra=lambda t: [
            span("kb", "root", t, t + 60 * MS, trace=tid, service="gw", layer="agent"),
            span("vec", "root", t + 61 * MS, t + 121 * MS, trace=tid, service="gw", layer="retrieval"),
        ])  # fmt: skip
        return spans

    sync = _of(_rank(_trees(make)), "shorten-sync")
    assert [c["operations"] for c in sync] == [["auth"]]  # the tool and the retrieval call are the request's work


# ------------------------------------------------------------------------------------------------ cap-retries


def _tool_calls(trace: str, t: int, calls: list[tuple[str, float, str]]) -> list[Span]:
    out = []
    for k, (name, ms, status) in enumerate(calls):
        d = round(ms * MS)
        out.append(span(f"c{k}", "root", t, t + d, name, trace=trace, service="tools", layer="agent", status=status))
        t += d + MS // 10
    return out


def _retry_set(first_status: str) -> list[TraceTree]:
    def make(k: int, r: random.Random) -> list[Span]:
        retried = k % 3 == 0
        calls = [("kb", r.uniform(80, 120), first_status if retried else "OK")]
        if retried:
            calls.append(("kb", r.uniform(80, 120), "OK"))
        return _gateway(f"t{k}", auth_ms=2, llm_ms=r.uniform(50, 150), extra=lambda t: _tool_calls(f"t{k}", t, calls))

    return _trees(make)


def test_cap_retries_proposed_for_calls_retried_after_an_error() -> None:
    trees = _retry_set("ERROR")
    doc = _rank(trees)
    caps = _of(doc, "cap-retries")
    assert [c["change"] for c in caps] == ['--cap-retries "kb=1"']
    assert "retried in 33% of traces" in caps[0]["evidence"]
    _check_alone(trees, caps[0])
    # a repeat after an error is a retry, not a cache hit
    assert not _of(doc, "cache")


def test_cap_retries_counts_traces_not_retry_runs() -> None:
    def make(k: int, r: random.Random) -> list[Span]:
        calls = [("kb", 50, "ERROR"), ("kb", 50, "OK"), ("web", 20, "OK"), ("kb", 50, "ERROR"), ("kb", 50, "OK")]
        return _gateway(f"t{k}", auth_ms=2, llm_ms=r.uniform(50, 150), extra=lambda t: _tool_calls(f"t{k}", t, calls))

    trees = _trees(make, n=20)
    caps = _of(_rank(trees), "cap-retries")
    assert [c["change"] for c in caps] == ['--cap-retries "kb=1"']
    assert "retried in 100% of traces" in caps[0]["evidence"]  # twice in each trace, not 200 %
    _check_alone(trees, caps[0])


def test_cap_retries_not_proposed_without_an_error() -> None:
    doc = _rank(_retry_set("OK"))
    assert not _of(doc, "cap-retries")


# ------------------------------------------------------------------------------------------------ cache


def _repeat_set(second: str) -> list[TraceTree]:
    def make(k: int, r: random.Random) -> list[Span]:
        calls = [("kb", r.uniform(80, 120), "OK"), (second, r.uniform(80, 120), "OK")]
        return _gateway(f"t{k}", auth_ms=2, llm_ms=r.uniform(50, 150), extra=lambda t: _tool_calls(f"t{k}", t, calls))

    return _trees(make)


def test_cache_proposed_for_a_repeated_identical_call() -> None:
    trees = _repeat_set("kb")
    doc = _rank(trees)
    cache = _of(doc, "cache")
    assert [c["change"] for c in cache] == ['--cache "kb=0.50:1ms"']  # half the kb calls repeat an earlier one
    assert "50% of kb calls repeat" in cache[0]["evidence"]
    _check_alone(trees, cache[0])
    assert not _of(doc, "cap-retries")  # no error before the repeat: not a retry


def test_cache_not_proposed_for_distinct_calls() -> None:
    doc = _rank(_repeat_set("web"))
    assert not _of(doc, "cache")


# ------------------------------------------------------------------------------------------------ scale


def test_scale_proposed_for_the_tail_critical_path_never_the_root_or_a_sliver() -> None:
    def make(k: int, r: random.Random) -> list[Span]:
        return _gateway(f"t{k}", auth_ms=0.5, llm_ms=r.lognormvariate(0, 0.5) * 400)

    trees = _trees(make)
    doc = _rank(trees)
    scale = _of(doc, "scale")
    assert [c["change"] for c in scale] == ['--scale "llm=0.5"']
    assert "of the ≥ p95 traces' critical path" in scale[0]["evidence"]
    _check_alone(trees, scale[0])
    ops = {op for c in scale for op in c["operations"]}
    assert "POST /chat" not in ops  # the root
    assert "auth" not in ops  # < 5 % of the tail's path


def test_scale_not_proposed_when_the_root_is_all_there_is() -> None:
    trees = _trees(lambda k, r: [span("root", None, 0, round(r.uniform(50, 500) * MS), "job", trace=f"t{k}")])
    doc = _rank(trees)
    assert not _of(doc, "scale")
    assert doc["candidates"] == []


# ------------------------------------------------------------------------------------------------ public API


def test_every_kind_through_tailscope_whatif_matches_the_change_alone(tmp_path: Path) -> None:
    """On a stored set with all four findings, each candidate's saving is that of ``tailscope.whatif`` given the
    candidate's change alone."""

    def make(k: int, r: random.Random) -> list[Span]:
        calls = [("kb", r.uniform(80, 120), "ERROR" if k % 3 == 0 else "OK")]
        if k % 3 == 0:
            calls.append(("kb", r.uniform(80, 120), "OK"))
        calls.append(("web", r.uniform(40, 60), "OK"))
        if k % 2 == 0:
            calls.append(("web", r.uniform(40, 60), "OK"))
        return _gateway(f"t{k}", auth_ms=40 * r.uniform(0.8, 1.2), llm_ms=r.lognormvariate(0, 0.5) * 400,
                        extra=lambda t: _tool_calls(f"t{k}", t, calls))  # fmt: skip

    rng = random.Random(11)
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("all", [s for k in range(N) for s in make(k, rng)])
    r = tailscope.whatif("all", rank=True, store=store, resamples=0)
    ops: dict[str, list[str]] = {}
    for c in r.candidates:
        ops.setdefault(c["kind"], []).extend(c["operations"])
    assert ops["shorten-sync"] == ["auth"]
    assert ops["cap-retries"] == ["kb"]
    assert ops["cache"] == ["web"]
    assert ops["scale"][0] == "llm"  # the largest share of the tail's critical path, so the largest saving
    for c in r.candidates:
        flag, _, value = c["change"].partition(" ")
        alone = tailscope.whatif("all", store=store, resamples=0,
                                 **{flag.removeprefix("--").replace("-", "_"): [value.strip('"')]})  # fmt: skip
        assert c["p95_saving_ms"] == pytest.approx(alone.saving["p95_ms"], abs=0.002), c["change"]
        assert c["p95_after_ms"] == pytest.approx(alone.after["p95_ms"], abs=0.002), c["change"]
