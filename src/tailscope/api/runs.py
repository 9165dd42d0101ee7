"""The runs kept in a store: list, show (in any tool's dialect), export, tag, delete, repair.

Every function takes ``store=``: a path or :class:`~tailscope.store.runs.RunStore`; None means the command line's
store (``$TAILSCOPE_DB`` or ``./.tailscope/tailscope.duckdb``). Listing and showing only read it (listing first folds
what crashed writers left, unless ``repair=False``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tailscope.api._support import StorePath, default_store, open_store, public
from tailscope.errors import ConfigError, StoreError
from tailscope.files import make_folder
from tailscope.metrics.dialects import DIALECTS, summarize_dialect
from tailscope.metrics.document import build_export, run_to_json
from tailscope.metrics.trend import RunsTrend, build_trend
from tailscope.records import Run
from tailscope.store.repair import RepairReport
from tailscope.store.runs import RunStore, StoredRun

EXPORT_FORMATS = ("json", "parquet", "csv")


def _store(store: StorePath | RunStore | None) -> RunStore:
    return open_store(store) or default_store()


@dataclass(frozen=True, slots=True)
class RunListing:
    """The newest runs (with request counts from their records) and what listing repaired first."""

    runs: tuple[StoredRun, ...]
    repair: RepairReport
    store_path: str
    repair_error: str | None = None  # the store was locked by another process: listed without repairing

    def to_dict(self) -> list[dict[str, Any]]:
        """The runs as ``runs list --json`` writes them: run, request counts, summary, tags, crash and quarantine."""
        return [
            {
                "run": run_to_json(r.run),
                "requests": r.requests.to_dict() if r.requests else None,
                "summary": r.summary,
                "tags": list(r.tags),
                "finished_at": r.finished_at,
                "heartbeat_at": r.heartbeat_at,
                "crash": r.extra.get("crash"),
                "quarantined": [
                    {"path": str(q.path), "reason": q.reason} for q in self.repair.quarantined if q.run_id == r.run.id
                ],
            }
            for r in self.runs
        ]


@public
def list_runs(
    *,
    store: StorePath | RunStore | None = None,
    limit: int = 30,
    kind: str | None = None,
    tag: str | None = None,
    repair: bool = True,
) -> RunListing:
    """The newest runs first, each with its request counts; crashed runs are repaired first (``repair=False``: not).

    Args:
        kind: only ``bench``, ``sim`` or ``trace`` runs. tag: only runs with this tag (``probe``: calibration and
            capacity-search probes, which ``latest`` never picks).
    """
    if limit < 1:
        raise ConfigError(f"--limit {limit}: list at least one run")
    runs_store = _store(store)
    report, problem = RepairReport(), None
    if repair:
        try:
            report = runs_store.repair()
        except StoreError as exc:  # a store another process keeps locked: list what is there
            problem = str(exc)
    runs = runs_store.list_runs(limit=limit, kind=kind, tag=tag)
    return RunListing(tuple(runs), report, str(runs_store.db.path), problem)


def _since_iso(since: str, now: datetime | None = None) -> str:
    """``7d``, ``48h``, ``2w`` (back from now) or an ISO date/time → the UTC ISO start it means."""
    import re
    from datetime import timedelta

    text = since.strip()
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([hdw])", text)
    if m:
        hours = float(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        start = (now or datetime.now(UTC)) - timedelta(hours=hours)
        return start.strftime("%Y-%m-%dT%H:%M:%S")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--since {since!r}: expected a span back from now (7d, 48h, 2w) or a date (2026-11-01)"
        ) from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


@public
def runs_trend(
    *,
    tag: str | None = None,
    since: str | None = None,
    kind: str | None = None,
    limit: int = 1000,
    store: StorePath | RunStore | None = None,
) -> RunsTrend:
    """TTFT and TPOT p50/p99 and daily tokens across the store's runs over time, with change points marked (the
    method's three numbers on the board and its weekly review).

    Args:
        tag: only runs with this tag (e.g. ``main``, or ``nightly``).
        since: only runs started since then: ``7d``, ``48h``, ``2w`` back from now, or an ISO date (UTC).
        kind: only ``bench``, ``sim`` or ``trace`` runs.
        limit: at most this many of the newest runs.
        store: the store (only read).

    Returns:
        ``trend.points`` (oldest run first, each with ``values["ttft_ms.p50"]`` …, tokens and the series that step
        there), ``trend.change_points`` (``describe()``), ``trend.daily`` (tokens per UTC day), ``trend.method`` and
        ``trend.to_dict()``. Probe runs (calibration, capacity search) are left out unless ``tag="probe"``.

    Raises:
        ConfigError: a malformed ``since`` or ``limit``.
    """
    if limit < 1:
        raise ConfigError(f"--limit {limit}: take at least one run")
    start = _since_iso(since) if since is not None else None
    stored = _store(store).list_runs(limit=limit, kind=kind, tag=tag)
    rows = [
        {
            "id": r.run.id,
            "started_at": r.run.started_at,
            "kind": str(r.run.kind.value if hasattr(r.run.kind, "value") else r.run.kind),
            "tags": r.tags,
            "summary": r.summary,
        }
        for r in stored
        if (start is None or r.run.started_at >= start) and (tag == "probe" or "probe" not in r.tags)
    ]
    filters = {"tag": tag, "since": since, "since_utc": start, "kind": kind, "limit": limit}
    return build_trend(rows, filters)


@dataclass(frozen=True, slots=True)
class RunView:
    """One stored run's summary, as tailscope or another tool (``dialect``) defines its metrics."""

    run: Run
    summary: dict[str, Any]
    dialect: str

    def to_dict(self) -> dict[str, Any]:
        return {"run": run_to_json(self.run), "summary": self.summary, "dialect": self.dialect}


@public
def show_run(ref: str = "latest", *, dialect: str = "tailscope", store: StorePath | RunStore | None = None) -> RunView:
    """A stored run's summary, recomputed as ``dialect`` (tailscope, vllm, aiperf, guidellm, sglang) defines it."""
    runs_store = _store(store)
    stored = runs_store.get_run(ref)
    name = dialect.strip().lower()
    if name == "tailscope":
        summary = stored.summary
        if summary is None:  # a run that never finished: computed from its records, its sessions too
            from tailscope.metrics.sessions import rebuilt_session_summary
            from tailscope.metrics.summary import summarize

            records = runs_store.load_records(stored.run.id)
            summary = summarize(records).to_dict()
            if (sessions := rebuilt_session_summary(records, stored.run.settings or {})) is not None:
                summary["sessions"] = sessions
        return RunView(stored.run, summary, name)
    if name not in DIALECTS:
        raise ConfigError(f"--dialect {dialect!r}: use one of {', '.join(DIALECTS)}")
    return RunView(stored.run, summarize_dialect(runs_store.load_records(stored.run.id), name), name)


@public
def export_run(
    ref: str, path: str | os.PathLike[str], *, fmt: str = "json", store: StorePath | RunStore | None = None
) -> Path:
    """Write a stored run's requests: ``json`` (the ``bench --json`` document), ``parquet`` or ``csv`` (the store's
    columns, times in ns; docs/metrics.md lists them). Returns the path written."""
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"--format {fmt!r}: use {', '.join(EXPORT_FORMATS)}")
    runs_store = _store(store)
    stored = runs_store.get_run(ref)
    out = Path(path)
    if fmt == "json":
        _write_json(out, build_export(stored.run, stored.summary or {}, runs_store.load_records(stored.run.id)))
    else:
        runs_store.export_requests(stored.run.id, out, fmt=fmt)
    return out


def _write_json(out: Path, doc: dict[str, Any]) -> None:
    import json

    make_folder(out.parent, "--out", out)
    try:
        out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None


@public
def tag_run(ref: str, name: str, *, store: StorePath | RunStore | None = None) -> str:
    """Tag a run (``latest:NAME`` then finds the newest run with that tag); returns the run's full id."""
    return _store(store).tag(ref, name)


@public
def delete_runs(refs: list[str], *, store: StorePath | RunStore | None = None) -> list[str]:
    """Delete runs with their records, samples, tags and leftovers (refused for a run a live process writes)."""
    return _store(store).delete_runs(refs)


@public
def repair_store(*, store: StorePath | RunStore | None = None) -> RepairReport:
    """Fold what crashed writers left into the store, mark their runs incomplete, report quarantined batches."""
    return _store(store).repair()
