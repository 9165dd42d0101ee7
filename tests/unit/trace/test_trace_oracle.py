"""The production facts (store rows → column tree → staged facts) equal the oracle's (tests/unit/trace/oracle.py:
spans → tree of Span objects → the reference functions) exactly, on random messy trees and on demo traces."""

from __future__ import annotations

import marshal
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_facts

from tailscope.records import Span
from tailscope.store.spans import SpanStore, rows_to_spans
from tailscope.trace.demo import demo_traces
from tailscope.trace.facts import TraceFacts, facts_from_rows, facts_from_tuple, facts_to_tuple, trace_facts
from tailscope.trace.ingest.sets import set_facts
from tailscope.trace.layers import LAYERS
from tailscope.trace.tree import SpanRow, build_tree, tree_from_rows

KINDS = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")


def to_rows(spans: list[Span]) -> list[SpanRow]:
    """Spans as the store returns them: rows sorted by (start, end, span id)."""
    rows: list[SpanRow] = []
    for s in spans:
        resend = s.attributes.get("http.request.resend_count")
        rows.append(
            (
                s.trace_id,
                s.span_id,
                s.parent_id,
                s.name,
                s.start_ns,
                s.end_ns,
                s.service,
                s.kind,
                s.status,
                s.layer,
                s.follows_from,
                resend if isinstance(resend, int) else None,
            )
        )
    rows.sort(key=lambda r: (r[4], r[5], r[1]))
    return rows


def reference(rows: list[SpanRow], async_blocking: bool = False, policy: str = "default") -> TraceFacts:
    return oracle_facts(rows_to_spans(rows), policy=policy, async_blocking=async_blocking)


@st.composite
def messy_traces(draw: st.DrawFn) -> list[SpanRow]:
    """Random traces with everything the tree builder handles: orphans, self-parents, cycles, duplicates,
    children outside their parent, several roots, async children, errors and resends, repeated names, ties."""
    n = draw(st.integers(1, 18))
    ids = [f"{k:02x}" for k in range(n)]
    rows: list[SpanRow] = []
    for k in range(n):
        choice = draw(st.integers(0, 9))
        if k == 0 or choice == 0:
            parent = None
        elif choice == 1:
            parent = "missing"
        else:
            parent = ids[draw(st.integers(0, n - 1))]  # may point forward (cycles) or at itself
        start = draw(st.integers(0, 60)) * 5  # coarse grid: ties and touching intervals are common
        end = start + draw(st.integers(0, 40)) * 5
        rows.append(
            (
                "t",
                ids[k] if draw(st.integers(0, 12)) else ids[draw(st.integers(0, k))],  # sometimes a duplicate id
                parent,
                draw(st.sampled_from(("a", "b", "c", "root"))),
                start,
                end,
                draw(st.sampled_from(("svc", "svc", "other"))),
                draw(st.sampled_from(KINDS)),
                draw(st.sampled_from(("UNSET", "ERROR", "OK"))),
                draw(st.sampled_from(LAYERS)),
                draw(st.booleans()) and draw(st.booleans()),
                draw(st.sampled_from((None, None, 0, 2))),
            )
        )
    rows.sort(key=lambda r: (r[4], r[5], r[1]))
    return rows


_MESSY = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@_MESSY
@given(messy_traces(), st.booleans(), st.sampled_from(("default", "jaeger")))
def test_facts_equal_the_oracle_on_messy_traces(rows: list[SpanRow], async_blocking: bool, policy: str) -> None:
    assert facts_from_rows(rows, policy=policy, async_blocking=async_blocking) == reference(
        rows, async_blocking, policy
    )


@_MESSY
@given(messy_traces(), st.randoms(use_true_random=False))
def test_facts_of_spans_in_any_order_equal_the_oracle(rows: list[SpanRow], rnd: random.Random) -> None:
    spans = rows_to_spans(rows)
    rnd.shuffle(spans)  # build_tree sorts; of repeated span ids the first given is kept, like the oracle
    # the oracle follows the order it is given: where two children end together it takes the first as the critical
    # one, so it is given the spans in the canonical order build_tree sorts into (after keeping the first of each id)
    seen: set[str] = set()
    kept = [s for s in spans if not (s.span_id in seen or seen.add(s.span_id))]  # type: ignore[func-returns-value]
    repeats = [s for s in spans if not any(s is k for k in kept)]  # after the kept ones: still counted, never kept
    canonical = sorted(kept, key=lambda s: (s.start_ns, s.end_ns, s.span_id)) + repeats
    assert in_any_order(trace_facts(build_tree(spans))) == in_any_order(oracle_facts(canonical))


def in_any_order(f: TraceFacts) -> TraceFacts:
    """The facts with retries and waterfalls sorted (their order follows span order, which the analyses ignore)."""
    f.retries.sort(key=repr)
    f.waterfalls.sort(key=repr)
    return f


def test_facts_equal_the_oracle_on_demo_traces() -> None:
    for spans in demo_traces(300, extra_calls=2, retry_rate=0.3):
        rows = to_rows(spans)
        fast = facts_from_rows(rows)
        assert fast == reference(rows)
        assert facts_from_rows(rows, policy="jaeger") == reference(rows, policy="jaeger")
    assert fast.waterfalls or fast.path_op  # the comparison covered real content


def test_facts_of_an_empty_trace() -> None:
    assert facts_from_rows([]) == oracle_facts([])


def test_facts_survive_the_trip_between_processes() -> None:
    facts = [facts_from_rows(to_rows(t)) for t in demo_traces(50, retry_rate=0.5)]
    data = marshal.dumps([facts_to_tuple(f) for f in facts])
    assert [facts_from_tuple(t) for t in marshal.loads(data)] == facts  # noqa: S302 - our own bytes


def test_set_facts_with_a_worker_process_equals_one_process(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    rng = random.Random(3)
    spans = [s for t in demo_traces(120, retry_rate=0.3) for s in t]
    rng.shuffle(spans)  # the store sorts each trace's rows
    store.write("s", spans)
    one = sorted(set_facts(store, "s", workers=1), key=lambda f: f.trace_id)
    two = sorted(set_facts(store, "s", workers=2), key=lambda f: f.trace_id)
    assert len(one) == 120
    assert one == two
    jaeger = set_facts(store, "s", workers=1, policy="jaeger")
    assert {f.trace_id for f in jaeger} == {f.trace_id for f in one}


def test_a_tree_of_rows_gives_back_its_spans() -> None:
    rows = to_rows(next(iter(demo_traces(1, retry_rate=1.0))))
    tree = tree_from_rows(rows)
    assert list(tree.spans) == rows_to_spans(rows)
    assert tree.root is not None
    assert tree.root.name == "POST /chat"
    assert build_tree(list(tree.spans)).span_ids == tree.span_ids


@_MESSY
@given(messy_traces(), st.data())
def test_waterfalls_with_consumption_marks_equal_the_oracle(rows: list[SpanRow], data: st.DataObject) -> None:
    from tailscope.trace.dependency import Marks

    ids = sorted({r[1] for r in rows})
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=8))
    consumes: dict[str, set[str]] = {}
    for a, b in pairs:
        consumes.setdefault(a, set()).add(b)
    tree = tree_from_rows(rows)
    marks = Marks({k: frozenset(v) for k, v in consumes.items()})
    got = trace_facts(tree, consumes=marks.by_index(tree))
    assert got == oracle_facts(rows_to_spans(rows), consumes=consumes)
