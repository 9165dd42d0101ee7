"""Reports: :func:`report_html` / :func:`write_report` — a self-contained HTML page of one run, a comparison of
several (with a sweep's curves and knee), or a trace set's analysis (or the diff of two sets).

The page's numbers are prepared here (diagnosis, bootstrap comparison, knee, trace analysis: :mod:`._pages`) and the
renderers of :mod:`tailscope.report` only draw them. The functions at the end give the ``tailscope ui`` dashboard
what it shows, so that the dashboard, like the CLI, reads the store only through the library.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tailscope.api import _pages
from tailscope.api._support import StorePath, public
from tailscope.api.verify import RunRef, _reader, is_export_ref, load_run, load_stored_run
from tailscope.errors import ConfigError
from tailscope.io.exports import read_export
from tailscope.metrics.document import build_export
from tailscope.report.html import ReportRun, render_compare_page, render_run_report, write_html
from tailscope.report.html_traces import TraceReport, render_trace_report
from tailscope.store.runs import RunStore, StoredRun

#: runs a sweep report looks through, newest first
SWEEP_SCAN = 10_000


def _one_or_many(runs: RunRef | Sequence[RunRef] | None) -> list[RunRef]:
    if runs is None:
        return []
    if isinstance(runs, str | os.PathLike) or not isinstance(runs, Sequence):
        return [runs]
    return list(runs)


def report_item(ref: RunRef, *, store: StorePath | RunStore | None = None) -> ReportRun:
    """One run as its report page shows it (summary, findings, per-turn summaries), from any run reference.

    A ``bench --json`` export that cannot be read is a ConfigError here (exit code 1, like every report input).
    """
    if isinstance(ref, str | os.PathLike) and is_export_ref(ref):
        return _pages.run_item(read_export(ref, error=ConfigError))
    return _pages.run_item(load_run(ref, store=store))


def stored_item(ref: str, *, store: StorePath | RunStore | None = None) -> ReportRun:
    """A run of the store (never a file: what the dashboard shows) as its report page shows it."""
    return _pages.run_item(load_stored_run(ref, store=store))


def sweep_run_ids(sweep_id: str, *, store: StorePath | RunStore | None = None) -> list[str]:
    """The ids of a sweep's runs in the store, oldest first (empty when there are none)."""
    ids = [s.run.id for s in _reader(store).list_runs(limit=SWEEP_SCAN) if s.run.sweep_id == sweep_id]
    return list(reversed(ids))


def compare_html(items: Sequence[ReportRun], *, resamples: int = 1000, seed: int = 0, nav: bool = False) -> str:
    """The comparison page of prepared runs: bootstrap marks, and a sweep's curves and knee when they form one."""
    cmp = _pages.comparison(items, resamples=resamples, seed=seed)
    return render_compare_page(items, comparison=cmp, sweep=_pages.sweep_points(items), nav=nav)


def trace_html(
    set_name: str, after: str | None = None, *, store: StorePath | RunStore | None = None, nav: bool = False
) -> str:
    """The page of a stored trace set, or of the diff ``set_name`` → ``after``.

    Raises:
        NotFoundError: when a set is not in the store.
    """
    from tailscope.store.spans import SpanStore
    from tailscope.trace.analysis import analyze_facts
    from tailscope.trace.diff import diff_sets
    from tailscope.trace.ingest.sets import set_facts

    spans = SpanStore(_reader(store).db)
    info = spans.get_set(set_name)
    facts = set_facts(spans, set_name)
    diff = None
    shown = set_name
    if after is not None:
        spans.get_set(after)
        facts_after = set_facts(spans, after)
        diff = diff_sets(facts, facts_after)
        facts, shown = facts_after, after
    chosen: list[tuple[str, str]] = []
    if facts:
        ordered = sorted(facts, key=lambda f: (f.duration_ns, f.trace_id))
        chosen.append((ordered[-1].trace_id, "slowest"))
        median = ordered[len(ordered) // 2]
        if median.trace_id != ordered[-1].trace_id:
            chosen.append((median.trace_id, "median"))
    waterfalls = [
        _pages.trace_waterfall(spans.load_trace(shown, trace_id)[1], f"{label} trace {trace_id}")
        for trace_id, label in chosen
    ]
    page = TraceReport(
        set_info=info,
        shown=shown,
        analysis=analyze_facts(facts),
        waterfalls=waterfalls,
        diff=diff,
        before=set_name if after is not None else None,
    )
    return render_trace_report(page, nav=nav)


@public
def report_html(
    runs: RunRef | Sequence[RunRef] | None = None,
    *,
    sweep: str | None = None,
    traces: str | Sequence[str] | None = None,
    store: StorePath | RunStore | None = None,
    resamples: int = 1000,
    seed: int = 0,
    trace_store: StorePath | None = None,
) -> str:
    """A self-contained HTML report (one page that works offline), as text.

    Give exactly one of:

    Args:
        runs: one run (its report: percentiles, charts, findings), or two or more (a comparison against the first,
            with significant differences marked; a sweep's curves when the runs form one). Results of this API,
            store references or export paths.
        sweep: a sweep id: every run of that sweep in the store, compared by load.
        traces: a trace set name (its analysis), or two (the diff of before and after). With one run and one set:
            the run's report with a "client and tree" section, the run joined with the set
            (:func:`tailscope.join_traces`; the run made with ``bench --trace-context``).

    Other args:
        store: where references, sweeps and trace sets are looked up (only read; default ``$TAILSCOPE_DB`` or
            ``./.tailscope/tailscope.duckdb``).
        trace_store: the store holding the set joined with a run, when not ``store`` (``trace collect --db``).
        resamples: bootstrap resamples of a comparison's intervals (≥ 100).
        seed: the bootstrap's seed.

    Raises:
        ConfigError: not exactly one of them, or a bad value. NotFoundError: a run, sweep or set is not there.
    """
    refs = _one_or_many(runs)
    sets = [traces] if isinstance(traces, str) else list(traces or [])
    if len(refs) == 1 and len(sets) == 1 and not sweep:
        return render_run_report(_joined_item(refs[0], sets[0], store=store, trace_store=trace_store))
    if sum(bool(x) for x in (refs, sweep, sets)) != 1:
        raise ConfigError("report: give run ids, or --sweep SWEEP_ID, or --traces SET (one of them)")
    if resamples < 100:
        raise ConfigError(f"--resamples must be ≥ 100 (got {resamples})")
    if sets:
        if len(sets) > 2:
            raise ConfigError("--traces: give one set (analysis) or two (before, after) for a diff")
        return trace_html(sets[0], sets[1] if len(sets) == 2 else None, store=store)
    if sweep:
        refs = list(sweep_run_ids(sweep, store=store))
        if len(refs) < 2:
            raise ConfigError(f"--sweep {sweep!r}: found {len(refs)} runs of that sweep; see `tailscope runs list`")
    items = [report_item(ref, store=store) for ref in refs]
    if len(items) == 1:
        return render_run_report(items[0])
    return compare_html(items, resamples=resamples, seed=seed)


def _joined_item(
    ref: RunRef, set_name: str, *, store: StorePath | RunStore | None, trace_store: StorePath | None
) -> ReportRun:
    """One stored run's report item with its join against ``set_name`` (both in ``store``)."""
    from tailscope.api.join import join_traces

    if not isinstance(ref, str):
        raise ConfigError("report RUN --traces SET: give the run as a stored run's id (or latest)")
    item = report_item(ref, store=store)
    joined = join_traces(ref, set_name, store=store, trace_store=trace_store).to_dict()
    joined.pop("per_request", None)  # the page shows distributions; trace join --json has every request
    return replace(item, join=joined)


@public
def write_report(
    path: str | os.PathLike[str],
    runs: RunRef | Sequence[RunRef] | None = None,
    *,
    sweep: str | None = None,
    traces: str | Sequence[str] | None = None,
    store: StorePath | RunStore | None = None,
    resamples: int = 1000,
    seed: int = 0,
    trace_store: StorePath | None = None,
) -> Path:
    """Write :func:`report_html`'s page to ``path`` (creating its folder) and return the path.

    Raises:
        ConfigError: as :func:`report_html`, or naming ``path`` when it cannot be written.
    """
    html = report_html(
        runs, sweep=sweep, traces=traces, store=store, resamples=resamples, seed=seed, trace_store=trace_store
    )
    return write_html(path, html)


# -- what the dashboard reads ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunIndex:
    """The runs of a store (newest first, filtered) and its trace sets, for the dashboard's list page."""

    store: str
    exists: bool
    runs: tuple[StoredRun, ...]
    trace_sets: tuple[Any, ...]


def run_index(
    *,
    store: StorePath | RunStore | None = None,
    kind: str | None = None,
    tag: str | None = None,
    text: str = "",
    limit: int = 500,
) -> RunIndex:
    """Runs (newest first, at most ``limit``) of one kind and tag whose id, target, profile, sweep or tags contain
    ``text``, and the store's trace sets."""
    rs = _reader(store)
    needle = text.lower()
    runs = [
        s
        for s in rs.list_runs(limit=limit, kind=kind, tag=tag)
        if not needle
        or any(
            needle in str(f).lower()
            for f in (s.run.id, s.run.target.url, s.run.target.model, s.run.profile, s.run.sweep_id, *s.tags)
            if f
        )
    ]
    return RunIndex(str(rs.db.path), rs.db.exists, tuple(runs), tuple(_trace_sets(rs)))


def _trace_sets(rs: RunStore) -> list[Any]:
    """Trace sets in the store (empty when the store has none)."""
    if not rs.db.exists:
        return []
    from tailscope.store.spans import SpanStore

    try:
        return list(SpanStore(rs.db).list_sets())
    except Exception:  # a store written before spans existed has no span tables; show runs anyway
        return []


def run_export(ref: str, *, store: StorePath | RunStore | None = None) -> dict[str, Any]:
    """The export document of a stored run (what ``tailscope runs export --format json`` writes)."""
    rs = _reader(store)
    stored = rs.get_run(ref)
    return build_export(stored.run, stored.summary or {}, rs.load_records(stored.run.id))
