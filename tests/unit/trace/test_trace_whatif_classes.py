"""What-if by class: a change that affects one class leaves the other's distribution where it was."""

from __future__ import annotations

import random
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from trace_helpers import span

import tailscope
from tailscope.records import Span
from tailscope.report.html_whatif import render_whatif_page
from tailscope.report.trace_console import print_whatif
from tailscope.store.spans import SpanStore
from tailscope.trace.changes import parse_change
from tailscope.trace.tree import build_tree
from tailscope.trace.whatif import NO_CLASS, Plan, Projection, project_trace, trace_class

MS = 1_000_000


def classed_traces(n: int = 400, *, key: str = "tailscope.request.class", seed: int = 3) -> list[list[Span]]:
    """``chat`` traces (root → llm) and ``rag`` traces (root → search → llm after it), the class on the root."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        tid = f"t{k:05d}"
        klass = "chat" if k % 2 else "rag"
        t = 0
        spans = []
        if klass == "rag":
            d = int(rng.uniform(40, 120) * MS)
            spans.append(span(f"{tid}s", f"{tid}r", t, t + d, "search", trace=tid))
            t += d
        d = int(rng.uniform(100, 300) * MS)
        spans.append(span(f"{tid}l", f"{tid}r", t, t + d, "llm", trace=tid))
        t += d
        root = span(f"{tid}r", None, 0, t + MS, "POST /chat", trace=tid, attributes={key: klass})
        out.append([root, *spans])
    return out


def _check_rag_only(doc: dict[str, object]) -> None:
    classes = doc["classes"]
    assert isinstance(classes, dict)
    assert set(classes) == {"chat", "rag"}
    chat, rag = classes["chat"], classes["rag"]
    assert chat["count"] == rag["count"] == 200
    for stat in ("p50", "p95", "p99"):
        b, a = chat["before"], chat["after"]
        assert a[f"{stat}_ms"] == b[f"{stat}_ms"]  # untouched class: the same distribution
        assert b[f"{stat}_low_ms"] <= a[f"{stat}_ms"] <= b[f"{stat}_high_ms"]
        assert chat["saving"][f"{stat}_ms"] == 0
        assert rag["after"][f"{stat}_ms"] < rag["before"][f"{stat}_low_ms"]  # the changed one moved out of it
        assert rag["saving"][f"{stat}_ms"] > 0


def test_projection_by_class_from_outcomes() -> None:
    plan = Plan([parse_change("scale", "search=0.2")])
    proj = Projection()
    for spans in classed_traces():
        tree = build_tree(spans)
        values = {s.span_id: str(s.attributes["tailscope.request.class"]) for s in spans if s.attributes}
        o = project_trace(tree, plan, klass=trace_class(tree, values))
        assert o is not None
        proj.outcomes.append(o)
    doc = proj.summary(resamples=200)
    _check_rag_only(doc)


def test_trace_class_prefers_the_root_then_the_earliest_span() -> None:
    spans = [span("r", None, 0, 10 * MS), span("a", "r", 1 * MS, 5 * MS), span("b", "r", 6 * MS, 9 * MS)]
    tree = build_tree(spans)
    assert trace_class(tree, {"r": "root", "b": "late"}) == "root"
    assert trace_class(tree, {"b": "late", "a": "early"}) == "early"
    assert trace_class(tree, {}) is None
    assert trace_class(tree, None) is None


def test_whatif_by_class_over_a_store(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", [s for t in classed_traces() for s in t])
    res = tailscope.whatif("case", scale=["search=0.2"], store=store)
    assert set(res.classes) == {"chat", "rag"}
    doc = res.to_dict()
    assert doc["class_attribute"] == "tailscope.request.class"
    _check_rag_only(doc)

    buf = StringIO()
    print_whatif(Console(file=buf, width=140), doc)
    text = buf.getvalue()
    assert "by class (tailscope.request.class)" in text
    assert "rag (200)" in text
    html = render_whatif_page(doc)
    assert 'id="classes"' in html
    assert ">rag<" in html

    off = tailscope.whatif("case", scale=["search=0.2"], store=store, class_attribute=None)
    assert off.classes == {}
    assert "classes" not in off.to_dict()


def test_whatif_class_attribute_is_an_option_and_unclassed_traces_are_none(tmp_path: Path) -> None:
    traces = classed_traces(40, key="gen_ai.request.class")
    for t in traces[:10]:  # ten traces without a class
        t[0] = span(t[0].span_id, None, t[0].start_ns, t[0].end_ns, t[0].name, trace=t[0].trace_id)
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", [s for t in traces for s in t])
    default = tailscope.whatif("case", scale=["search=0.2"], store=store)
    assert default.classes == {}  # the default attribute is not there
    res = tailscope.whatif("case", scale=["search=0.2"], store=store, class_attribute="gen_ai.request.class")
    assert {k: v["count"] for k, v in res.classes.items()} == {"chat": 15, "rag": 15, NO_CLASS: 10}


def test_whatif_by_class_from_a_file(tmp_path: Path) -> None:
    import json

    from tailscope.trace.demo import to_otlp_json

    src = tmp_path / "c.otlp.json"
    src.write_text(json.dumps(to_otlp_json([s for t in classed_traces() for s in t])))
    res = tailscope.whatif(src, scale=["search=0.2"])
    _check_rag_only(res.to_dict())


@pytest.mark.parametrize(("value", "text"), [(7, "7"), (True, "true"), ("a", "a")])
def test_non_text_class_values_read_as_json_text(tmp_path: Path, value: object, text: str) -> None:
    import json

    from tailscope.trace.demo import to_otlp_json

    spans = [span("r", None, 0, 10 * MS, "root", attributes={"tailscope.request.class": value}),
             span("a", "r", 1 * MS, 5 * MS, "a")]  # fmt: skip
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", spans)
    res = tailscope.whatif("case", scale=["a=0.5"], store=store, resamples=0)
    assert list(res.classes) == [text]
    src = tmp_path / "c.otlp.json"
    src.write_text(json.dumps(to_otlp_json(spans)))
    assert list(tailscope.whatif(src, scale=["a=0.5"], resamples=0).classes) == [text]


def test_rank_gives_each_fix_its_p95_saving_per_class(tmp_path: Path) -> None:
    """``rag`` traces run a search before the llm, ``chat`` traces only the llm: a search fix saves rag's P95 and
    nothing of chat's, an llm fix saves both, and each class's figure is that class's own what-if."""
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", [s for t in classed_traces() for s in t])
    res = tailscope.whatif("case", rank=True, store=store, resamples=0)
    doc = res.to_dict()
    assert list(doc["p95_before_by_class_ms"]) == ["chat", "rag"]  # equal counts: by name
    by_change = {c["change"]: c for c in res.candidates}
    search = [c for c in res.candidates if c["operations"] == ["search"]]
    llm = [c for c in res.candidates if c["operations"] == ["llm"]]
    assert search
    assert llm
    for c in search:
        assert c["classes"]["chat"]["p95_saving_ms"] == 0
        assert c["classes"]["chat"]["p95_after_ms"] == doc["p95_before_by_class_ms"]["chat"]
        assert c["classes"]["rag"]["p95_saving_ms"] > 0
    for c in llm:
        assert c["classes"]["chat"]["p95_saving_ms"] > 0
        assert c["classes"]["rag"]["p95_saving_ms"] > 0
    # each class's figure is what a what-if of that fix alone gives the class
    scale = by_change['--scale "search=0.5"']
    alone = tailscope.whatif("case", scale=["search=0.5"], store=store, resamples=0)
    for k in ("chat", "rag"):
        assert scale["classes"][k]["p95_after_ms"] == pytest.approx(alone.classes[k]["after"]["p95_ms"], abs=1e-3)
        assert doc["p95_before_by_class_ms"][k] == pytest.approx(alone.classes[k]["before"]["p95_ms"], abs=1e-3)
    assert all(set(g["classes"]) == {"chat", "rag"} for g in res.greedy)

    buf = StringIO()
    print_whatif(Console(file=buf, width=220), doc)
    text = buf.getvalue()
    assert "saves chat" in text
    assert "saves rag" in text
    assert "saves ms: rag" in render_whatif_page(doc)

    off = tailscope.whatif("case", rank=True, store=store, resamples=0, class_attribute=None)
    assert "p95_before_by_class_ms" not in off.to_dict()
    assert all("classes" not in c for c in off.candidates)
    assert [c["p95_saving_ms"] for c in off.candidates] == [c["p95_saving_ms"] for c in res.candidates]
