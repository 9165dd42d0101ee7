"""What-if changes naming operations the set does not have: a warning per unknown name (with close names), and one
clear error before any work when no change names anything of the set."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from trace_helpers import span

import tailscope
from tailscope.errors import ConfigError, UnknownOperationError
from tailscope.records import Span
from tailscope.report.html_whatif import render_whatif_page
from tailscope.report.trace_console import print_whatif
from tailscope.store.spans import SpanStore
from tailscope.trace.changes import Operations, matches_nothing, parse_change, unmatched

MS = 1_000_000


def _traces(n: int = 30) -> list[Span]:
    out = []
    for k in range(n):
        tid = f"t{k:03d}"
        out += [
            span(f"{tid}r", None, 0, 300 * MS, "POST /chat", trace=tid, service="gateway", layer="gateway"),
            span(f"{tid}a", f"{tid}r", 0, 50 * MS, "search_a", trace=tid, service="kb", layer="retrieval"),
            span(f"{tid}b", f"{tid}r", 50 * MS, 100 * MS, "search_b", trace=tid, service="kb", layer="retrieval"),
            span(f"{tid}l", f"{tid}r", 100 * MS, (290 - k) * MS, "llm answer", trace=tid, layer="inference"),
        ]
    return out


OPS = Operations.from_rows([("search_a", "kb", "retrieval"), ("search_b", "kb", "retrieval"),
                            ("llm answer", "svc", "inference"), ("POST /chat", "gateway", "gateway")])  # fmt: skip


def test_unmatched_names_close_matches_and_layers() -> None:
    changes = [
        parse_change("scale", "serch_a=0.5"),  # a typo
        parse_change("remove", "LLM ANSWER"),  # wrong case
        parse_change("set-duration", "retrieval=5ms"),  # a layer, not an operation
        parse_change("scale", "kb=0.5"),  # a service
        parse_change("parallel", "search_a,search_c"),  # one of two operations unknown
        parse_change("scale", "search_*=0.5"),  # a glob that matches
        parse_change("remove", "zzz"),  # nothing close
    ]
    got = {(u.change.text, u.operation): u for u in unmatched(changes, OPS)}
    assert set(got) == {("serch_a=0.5", "serch_a"), ("LLM ANSWER", "LLM ANSWER"), ("retrieval=5ms", "retrieval"),
                        ("kb=0.5", "kb"), ("search_a,search_c", "search_c"), ("zzz", "zzz")}  # fmt: skip
    assert got["serch_a=0.5", "serch_a"].close[0] == "search_a"
    assert got["LLM ANSWER", "LLM ANSWER"].close == ("llm answer",)
    layer = got["retrieval=5ms", "retrieval"]
    assert layer.group == "layer 'retrieval'"
    assert layer.close == ("search_a", "search_b")
    assert "is not an operation" in layer.message()
    assert got["kb=0.5", "kb"].group == "service 'kb'"
    assert set(got["search_a,search_c", "search_c"].close) >= {"search_a", "search_b"}
    zzz = got["zzz", "zzz"]
    assert zzz.close == ()
    assert zzz.message() == '--remove "zzz": no span is named \'zzz\' (no operation of the set is close to it); it ' \
                            "projects no saving"  # fmt: skip
    assert matches_nothing(changes, list(got.values())) is False
    only_bad = [changes[0], changes[6]]
    assert matches_nothing(only_bad, unmatched(only_bad, OPS)) is True
    assert matches_nothing([], []) is False


def test_a_partly_unknown_what_if_warns_everywhere(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", _traces())
    res = tailscope.whatif("case", scale=["search_a=0.5", "serch_b=0.5"], store=store, resamples=0)
    assert res.saving["p50_ms"] > 0  # the known change still projects
    assert res.unmatched == [{"flag": '--scale "serch_b=0.5"', "operation": "serch_b",
                              "close": ["search_b", "search_a"], "group": ""}]  # fmt: skip
    [line] = [w for w in res.warnings if "serch_b" in w]
    assert "did you mean 'search_b'" in line
    doc = res.to_dict()
    assert doc["unmatched"] == res.unmatched
    json.dumps(doc)
    buf = StringIO()
    print_whatif(Console(file=buf, width=200), doc)
    assert "did you mean 'search_b'" in buf.getvalue()
    assert "serch_b" in render_whatif_page(doc)

    clean = tailscope.whatif("case", scale=["search_*=0.5"], store=store, resamples=0)
    assert clean.unmatched == []
    assert clean.warnings == []


@pytest.mark.parametrize("as_file", [False, True])
def test_no_change_matching_anything_is_bad_input(tmp_path: Path, as_file: bool) -> None:
    from tailscope.trace.demo import to_otlp_json

    store = SpanStore(tmp_path / "s.duckdb")
    source: str | Path = "case"
    if as_file:
        source = tmp_path / "c.otlp.json"
        source.write_text(json.dumps(to_otlp_json(_traces())))
    else:
        store.write("case", _traces())
    with pytest.raises(UnknownOperationError) as err:
        tailscope.whatif(source, scale=["serch_a=0.5"], set_duration=["kb=5ms"], store=store)
    msg = str(err.value)
    assert "\n" not in msg
    assert '--scale "serch_a=0.5"' in msg
    assert "did you mean 'search_a'" in msg
    assert "service 'kb' is not an operation: name its operations ('search_a', 'search_b')" in msg
    assert "tailscope trace analyze" in msg
    assert err.value.exit_code == 2
    assert isinstance(err.value, ConfigError)
    # --rank with a bad change: still bad input (the change was meant to apply under the ranking)
    with pytest.raises(UnknownOperationError):
        tailscope.whatif(source, remove=["nope"], rank=True, store=store)


def test_the_check_runs_before_the_set_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", _traces())

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("read the set before checking the changes")

    monkeypatch.setattr(SpanStore, "iter_trace_rows", boom)
    monkeypatch.setattr(SpanStore, "dependency_rows", boom)
    monkeypatch.setattr(SpanStore, "attribute_values", boom)
    with pytest.raises(UnknownOperationError):
        tailscope.whatif("case", parallel=["x,y"], store=store)


@pytest.mark.parametrize("as_file", [False, True])
def test_an_unknown_root_op_is_bad_input_before_reading(
    tmp_path: Path, as_file: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailscope.trace.demo import to_otlp_json

    store = SpanStore(tmp_path / "s.duckdb")
    source: str | Path = "case"
    if as_file:
        source = tmp_path / "c.otlp.json"
        source.write_text(json.dumps(to_otlp_json(_traces())))
    else:
        store.write("case", _traces())

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("read the set before checking --root-op")

    monkeypatch.setattr(SpanStore, "iter_trace_rows", boom)
    for kwargs in ({"scale": ["search_a=0.5"]}, {"rank": True}):
        with pytest.raises(UnknownOperationError) as err:
            tailscope.whatif(source, root_op="post /chat", store=store, **kwargs)  # type: ignore[arg-type]
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith("--root-op \"post /chat\": no span is named 'post /chat' (did you mean 'POST /chat'?)")
        assert err.value.exit_code == 2
    with pytest.raises(UnknownOperationError, match=r"(layer|service) 'gateway' is not an operation.*'POST /chat'"):
        tailscope.whatif(source, root_op="gateway", scale=["search_a=0.5"], store=store)
    with pytest.raises(ConfigError, match="--root-op is empty"):
        tailscope.whatif(source, root_op=" ", scale=["search_a=0.5"], store=store)


def test_a_root_op_of_no_root_names_the_roots(tmp_path: Path) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", _traces())
    with pytest.raises(UnknownOperationError) as err:
        tailscope.whatif("case", root_op="search_a", scale=["search_a=0.5"], store=store)
    msg = str(err.value)
    assert "\n" not in msg
    assert "no trace of case has its root span named 'search_a'" in msg
    assert "roots of the set: 'POST /chat'" in msg
    assert err.value.exit_code == 2
    ok = tailscope.whatif("case", root_op="POST /chat", scale=["search_a=0.5"], store=store, resamples=0)
    assert ok.traces == 30
    assert ok.warnings == []


def test_unknown_independent_operations_warn_or_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", _traces())
    par = ["search_a,search_b"]
    # one of three unknown: the other two still pair — a warning naming the close name
    res = tailscope.whatif("case", parallel=par, independent=["search_a,search_b,serch_c"], store=store, resamples=0)
    [u] = res.unmatched
    assert (u["flag"], u["operation"], u["group"]) == ('--independent "search_a,search_b,serch_c"', "serch_c", "")
    assert set(u["close"]) == {"search_a", "search_b"}
    [line] = [w for w in res.warnings if "serch_c" in w]
    assert line.endswith("no pair with it is declared independent")
    # a group left with one operation pairs nothing; another group still does: a warning, not an error
    res = tailscope.whatif(
        "case", parallel=par, independent=["search_a,search_b", "SEARCH_A,llm answer"], store=store, resamples=0
    )
    [u] = res.unmatched
    assert (u["operation"], u["close"][0]) == ("SEARCH_A", "search_a")
    assert tailscope.whatif("case", parallel=par, independent=["search_a,search_b"], store=store).unmatched == []

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("read the set before checking --independent")

    monkeypatch.setattr(SpanStore, "iter_trace_rows", boom)
    monkeypatch.setattr(SpanStore, "dependency_rows", boom)
    # no group names two operations of the set: bad input, one line, before reading
    for independent in (["serch_a,serch_b"], ["serch_a,search_b", "retrieval,zzz"]):
        with pytest.raises(UnknownOperationError) as err:
            tailscope.whatif("case", parallel=par, independent=independent, rank=True, store=store)
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith("no --independent group names two operations of case: ")
        assert "'serch_a' (did you mean 'search_a'" in msg
        assert err.value.exit_code == 2
    assert "layer 'retrieval' is not an operation" in msg


@pytest.mark.parametrize("as_file", [False, True])
def test_trace_analyze_checks_its_root_op_too(tmp_path: Path, as_file: bool) -> None:
    from tailscope.trace.demo import to_otlp_json

    store = SpanStore(tmp_path / "s.duckdb")
    source: str | Path = "case"
    if as_file:
        source = tmp_path / "c.otlp.json"
        source.write_text(json.dumps(to_otlp_json(_traces())))
    else:
        store.write("case", _traces())
    for root_op, expect in (
        ("post /chat", "did you mean 'POST /chat'"),
        ("search_a", "roots of the set: 'POST /chat'"),
    ):
        with pytest.raises(UnknownOperationError) as err:
            tailscope.analyze_traces(source, root_op=root_op, store=store)
        assert "\n" not in str(err.value)
        assert str(err.value).startswith(f'--root-op "{root_op}": ')
        assert expect in str(err.value)
        assert err.value.exit_code == 2
    assert tailscope.analyze_traces(source, root_op="POST /chat", store=store).traces["count"] == 30


def test_trace_analyze_checks_an_unknown_root_op_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SpanStore(tmp_path / "s.duckdb")
    store.write("case", _traces())

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("read the set before checking --root-op")

    monkeypatch.setattr(SpanStore, "iter_trace_rows", boom)
    with pytest.raises(UnknownOperationError, match="did you mean 'POST /chat'"):
        tailscope.analyze_traces("case", root_op="POST /chats", store=store)
