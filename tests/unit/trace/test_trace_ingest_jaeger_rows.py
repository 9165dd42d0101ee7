"""Jaeger rows: the fast paths of ``jaeger_trace_rows`` (one CHILD_OF reference, services looked up once per
processID and trace, cached ``span.kind`` values, no status tags) give the same rows and problems as the plain
reading they replaced (kept here as the reference), on random messy spans."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.trace.ingest.common import ParseContext, make_row, parse_int, parse_kind
from tailscope.trace.ingest.jaeger import _status, _tags, jaeger_trace_rows


def reference_rows(traces: list[Any], base: str, ctx: ParseContext) -> Iterator[dict[str, Any]]:
    """The reading before the fast paths (tailscope at 8de87c7), verbatim in what it does."""
    for t_i, trace in enumerate(traces):
        tpos = f"{base}[{t_i}]"
        if not isinstance(trace, Mapping) or not isinstance(trace.get("spans"), list):
            ctx.problem(tpos, "not a Jaeger trace (no spans list), skipped")
            continue
        procs = trace.get("processes")
        processes: Mapping[str, Any] = procs if isinstance(procs, Mapping) else {}
        for k, sp in enumerate(trace["spans"]):
            if type(sp) is not dict:
                ctx.problem(f"{tpos}.spans[{k}]", "span is not an object, skipped")
                continue
            tags = _tags(sp.get("tags"))
            proc = sp.get("process") or processes.get(str(sp.get("processID")), {})
            service = str(proc.get("serviceName", "")) if type(proc) is dict else ""
            refs = [r for r in sp.get("references") or () if type(r) is dict]
            parent, follows = sp.get("parentSpanID"), False
            if refs:
                child_of = [r for r in refs if str(r.get("refType", "")).upper() == "CHILD_OF"]
                if child_of:
                    parent = child_of[0].get("spanID")
                else:
                    parent, follows = refs[0].get("spanID"), True
            start_us = parse_int(sp.get("startTime"))
            dur_us = parse_int(sp.get("duration"))
            start = start_us * 1000 if start_us is not None else None
            end = start + dur_us * 1000 if start is not None and dur_us is not None else None
            row = make_row(
                ctx, (f"{tpos}.spans", k), sp.get("traceID") or trace.get("traceID"), sp.get("spanID"), parent,
                sp.get("operationName"), start, end, service, parse_kind(tags.get("span.kind")), _status(tags), tags,
                tuple((str(r.get("traceID", "")), str(r.get("spanID", ""))) for r in refs[1:]), follows,
            )  # fmt: skip
            if row is not None:
                yield row


# mostly usable values (a span needs ids and times to become a row), sometimes not
IDS = st.sampled_from(["00000000000000a1", "b2", "c3c3c3c3c3c3c3c3", "d4", "e5", "0", "", None, 7])
TRACE_IDS = st.sampled_from(["00000000000000000000000000000abc", "abd", "abe", "", None])
REF = st.fixed_dictionaries(
    {"refType": st.sampled_from(["CHILD_OF", "CHILD_OF", "child_of", "FOLLOWS_FROM", "", 3]), "spanID": IDS},
    optional={"traceID": st.sampled_from(["00000000000000000000000000000abc", "x"])},
)
CHILD_OF = st.fixed_dictionaries({"refType": st.just("CHILD_OF"), "spanID": IDS, "traceID": TRACE_IDS})
REFS = st.one_of(
    st.none(),
    st.just([]),
    st.builds(lambda r: [r], CHILD_OF),  # the common case
    st.builds(lambda r: [r], REF),
    st.lists(st.one_of(REF, st.sampled_from(["not a ref", 5, None])), min_size=1, max_size=3),
    st.sampled_from(["not a list", ("a",)]),
)
TAG_VALUES = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(), st.just("12"))
TAG = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["span.kind", "error", "otel.status_code", "http.request.method", "gen_ai.system", 9]),
        "value": st.one_of(
            TAG_VALUES, st.sampled_from(["server", "CLIENT", "SPAN_KIND_PRODUCER", "2", "true", "ERROR"])
        ),
    },
    optional={"type": st.sampled_from(["string", "int64", "INT64", "bool"])},
)
STATUS_TAG = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["error", "otel.status_code"]),
        "value": st.sampled_from([True, "true", "True", "ERROR", "OK", "ok", False, None]),
    }
)
TIMES = st.one_of(
    st.integers(0, 10**15), st.integers(0, 10**6), st.sampled_from(["1700000000000000", "12.5", True, None, 1.0e6])
)
SPAN = st.fixed_dictionaries(
    {
        "spanID": IDS,
        "traceID": TRACE_IDS,
        "startTime": TIMES,
        "duration": TIMES,
        "references": REFS,
        "tags": st.one_of(st.lists(st.one_of(TAG, STATUS_TAG, st.just("junk")), max_size=5), st.just("not a list")),
        "processID": st.sampled_from(["p1", "p2", "p1", "p9", 1, None]),
    },
    optional={
        "operationName": st.sampled_from(["op", "chat gpt", 5, None]),
        "parentSpanID": IDS,
        "process": st.one_of(st.none(), st.just({}), st.just({"serviceName": "inline"}), st.just("bad")),
    },
)
TRACE: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"spans": st.lists(st.one_of(SPAN, SPAN, st.just("not a span")), max_size=8)},
    optional={
        "traceID": st.sampled_from(["00000000000000000000000000000def", None]),
        "processes": st.one_of(
            st.just({"p1": {"serviceName": "gateway"}, "p2": {"serviceName": 3}, "1": {"serviceName": "one"}}),
            st.just({"p1": "not a process"}),
            st.just([]),
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TRACE, TRACE, st.just({"no": "spans"})), min_size=1, max_size=4))
def test_fast_paths_give_the_reference_rows(traces: list[Any]) -> None:
    got_ctx, want_ctx = ParseContext(source="f"), ParseContext(source="f")
    got = list(jaeger_trace_rows(traces, "data", got_ctx))
    want = list(reference_rows(traces, "data", want_ctx))
    assert got == want
    assert got_ctx.problems == want_ctx.problems
    assert got_ctx.dropped == want_ctx.dropped
