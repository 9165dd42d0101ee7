"""Glue between files, the store and the pure analyses: ingest files into a set, compute a set's facts.

Both steps use worker processes for large inputs (parsing is per file; facts are per hash partition of trace ids,
each worker reading its partition from the store read-only), because parsing and tree walking are CPU-bound Python.
Small inputs stay in-process.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from tailscope.errors import TraceFormatError
from tailscope.store.spans import SpanStore, write_rows_files
from tailscope.trace.facts import TraceFacts, facts_from_rows, facts_from_tuple, facts_to_tuple
from tailscope.trace.ingest.common import ParseContext, Problem
from tailscope.trace.ingest.pieces import DamagedPiece, Piece, piece_rows, split_file
from tailscope.trace.layers import LayerRule
from tailscope.trace.tree import SpanRow

#: Inputs at least this large (bytes of files, or spans in a set) use worker processes.
PARALLEL_MIN_BYTES = 20_000_000
PARALLEL_MIN_SPANS = 200_000


@dataclass(slots=True)
class IngestReport:
    """What an ingest did: spans loaded per file and the problems found."""

    spans: int = 0
    files: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0


def default_workers() -> int:
    """Worker processes to use: the CPUs this process may run on (its affinity, e.g. under ``taskset``), at most 8."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, 8))


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk phase (parsing, per-trace facts).

    These phases allocate millions of dicts, lists and tuples and keep many alive (a parsed document, the facts so
    far), so the collector keeps re-scanning them without ever finding a cycle: pausing it cut parsing by ~30 %.
    Memory is still freed by reference counting; the collector is resumed (if it was running) afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _mp_context() -> BaseContext:
    """Worker processes from a fork server that imported the parsers and analyses once.

    A worker then starts in milliseconds instead of re-importing everything (spawn, ~0.5 s of CPU each), and nothing
    is forked from a process that runs DuckDB threads. Falls back to spawn where there is no fork server.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _parse_piece(piece: Piece, rules: Sequence[LayerRule], out: str) -> tuple[int, list[Problem], int, list[str]]:
    """Parse one piece into batch files ``OUT.K.json`` (in a worker process or inline); ``n`` is -1 for a
    :class:`DamagedPiece` (nothing written: the file is read whole instead)."""
    ctx = ParseContext(source=piece.path, rules=rules)
    with no_cyclic_gc():
        try:
            n, files = write_rows_files(Path(out), piece_rows(piece, ctx))
        except DamagedPiece:
            return -1, [], 0, []
    return n, ctx.problems, ctx.dropped, [str(f) for f in files]


def ingest_paths(
    store: SpanStore,
    set_name: str,
    paths: Sequence[str | Path],
    *,
    fmt: str = "auto",
    rules: Sequence[LayerRule] = (),
    workers: int | None = None,
) -> IngestReport:
    """Parse trace files and append their spans to a set; bad input is reported, good spans still load.

    Every file is cut into pieces (:mod:`tailscope.trace.ingest.pieces`: line ranges, slices of a large document's
    span arrays, slices of a protobuf request), parsed into batch files by worker processes when the input is large,
    and all batch files are folded into the store in one transaction at the end.

    Args:
        store: the span store.
        set_name: the set to add to.
        paths: trace files.
        fmt: ``auto`` or a format name (see :data:`tailscope.trace.ingest.files.FORMATS`).
        rules: user layer rules.
        workers: worker processes (default: CPU count when the files are large, else 1).

    Raises:
        TraceFormatError: when no file yields a span (empty, truncated before the first span, not a trace file),
            naming the first file and why.
    """
    size = 0
    for p in paths:
        with contextlib.suppress(OSError):
            size += os.path.getsize(p)
    n_workers = workers if workers is not None else (default_workers() if size >= PARALLEL_MIN_BYTES else 1)
    stem = store.batch_path("i")
    report = IngestReport()
    try:
        with _runner(n_workers) as submit, no_cyclic_gc():  # a large document is parsed here to be cut
            jobs: list[tuple[str, ParseContext, list[Any]]] = []

            def whole(path: str, k: int) -> tuple[int, list[Problem], int, list[str]]:
                return _parse_piece(Piece(path, fmt), tuple(rules), f"{stem}-{k}-whole")

            # enough pieces for every worker to have a few, whether they come from many files or from cutting few
            parts = -(-n_workers * PIECES_PER_WORKER // max(1, len(paths))) if n_workers > 1 else 1
            for path in map(str, paths):
                ctx = ParseContext(source=path, rules=rules)
                pieces = split_file(path, fmt, parts, ctx)
                futures = [
                    submit(_parse_piece, piece, tuple(rules), f"{stem}-{len(jobs)}-{k}")
                    for k, piece in enumerate(pieces)
                ]
                jobs.append((path, ctx, futures))
            written = _collect(jobs, report, whole)
        _check_something_loaded(report)
        store.fold(set_name, written, source=", ".join(str(p) for p in paths)[:500])
    finally:
        for f in stem.parent.glob(f"{stem.name}-*.json"):  # also the files of a piece that failed half-way
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    return report


_EXPECTED = "expected OTLP JSON or JSON lines, OTLP protobuf, Jaeger JSON or Zipkin v2 JSON"


def _check_something_loaded(report: IngestReport) -> None:
    """Raise when no file yielded a span, naming the first file and why (its first problem); a file without spans
    beside files with spans is reported as a problem (bad input never stops an ingest)."""
    empty = [path for path, n in report.files.items() if n == 0]
    for path in empty:
        if not any(p.source == path for p in report.problems):
            report.problems.append(Problem(path, "", "no span in this file"))
            report.problem_count += 1
    if report.spans or not empty:
        return
    path = empty[0]
    found = next(p for p in report.problems if p.source == path)
    why = f"{found.position}: {found.message}" if found.position else found.message
    more = f"; {len(empty) - 1} more file(s) without spans" if len(empty) > 1 else ""
    raise TraceFormatError(f"{path}: no spans ({why}){more}; {_EXPECTED}; nothing was ingested")


class _Inline:
    """A finished future (for the one-process path)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


@contextlib.contextmanager
def _runner(workers: int) -> Iterator[Any]:
    """``submit(fn, *args)``: in a pool of worker processes, or inline when ``workers`` is 1."""
    if workers <= 1:
        yield lambda fn, *args: _Inline(fn(*args))
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context()) as pool:
        yield pool.submit


def rows_facts(
    traces: Iterable[list[SpanRow]], *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stream of traces as store rows."""
    return [facts_from_rows(t, policy=policy, async_blocking=async_blocking) for t in traces]


def _collect(
    jobs: list[tuple[str, ParseContext, list[Any]]],
    report: IngestReport,
    whole: Callable[[str, int], tuple[int, list[Problem], int, list[str]]],
) -> list[Path]:
    """Wait for every piece of every file, in order; add spans and problems per file to ``report``; return the
    batch files written. A file with a damaged piece is read again whole by ``whole(path, index)``, its pieces
    dropped."""
    written: list[Path] = []
    for k, (path, ctx, futures) in enumerate(jobs):
        results = [fut.result() for fut in futures]
        problems, dropped = list(ctx.problems), ctx.dropped
        if any(r[0] < 0 for r in results):
            for _, _, _, files in results:
                for f in files:
                    Path(f).unlink(missing_ok=True)
            results, problems, dropped = [whole(path, k)], [], 0
        n_file = 0
        for n, found, lost, files in results:
            written.extend(Path(f) for f in files)
            n_file += n
            problems.extend(found)
            dropped += lost
        report.files[path] = n_file
        report.spans += n_file
        report.problems.extend(problems)
        report.problem_count += dropped
    return written


#: Hash buckets of trace ids that the processes of :func:`set_facts` share out.
FACT_BUCKETS = 1000
#: Pieces each worker's share is cut into: of a large file (for balance), of a set's traces (so the main process
#: decodes early pieces while later ones are computed).
PIECES_PER_WORKER = 2


def _bucket_facts(
    db_path: str, set_name: str, buckets: tuple[int, int, int], policy: str, async_blocking: bool
) -> bytes:
    store = SpanStore(db_path)
    with no_cyclic_gc():
        facts = rows_facts(
            store.iter_trace_rows(set_name, buckets=buckets), policy=policy, async_blocking=async_blocking
        )
        return marshal.dumps([facts_to_tuple(f) for f in facts])


def _shares(n: int) -> tuple[tuple[int, int, int], list[tuple[int, int, int]]]:
    """Buckets for the main process and the workers' pieces. With two processes the main one takes a little more
    than half (measured best): a worker starts later and also encodes its facts; the main process decodes the
    early pieces while the last one is computed."""
    main_hi = int(FACT_BUCKETS * 0.54) if n == 2 else FACT_BUCKETS // n
    pieces = (n - 1) * PIECES_PER_WORKER
    edges = [main_hi + (FACT_BUCKETS - main_hi) * k // pieces for k in range(pieces + 1)]
    return (0, main_hi, FACT_BUCKETS), [(edges[k], edges[k + 1], FACT_BUCKETS) for k in range(pieces)]


def set_facts(
    store: SpanStore,
    set_name: str,
    *,
    policy: str = "default",
    async_blocking: bool = False,
    workers: int | None = None,
) -> list[TraceFacts]:
    """Per-trace facts of a stored set, streamed from the store trace by trace (in worker processes when large).

    With ``n`` processes the main process computes one share of the traces (by hash of trace id) itself while
    ``n - 1`` workers compute the rest and send their facts back marshalled as plain tuples (pickling the dataclasses
    cost about as much as computing them). The order of the returned facts follows the hash buckets; analyses do not
    depend on it.
    """
    info = store.get_set(set_name)
    n = workers if workers is not None else (default_workers() if info.spans >= PARALLEL_MIN_SPANS else 1)
    if n <= 1:
        with no_cyclic_gc():
            return rows_facts(store.iter_trace_rows(set_name), policy=policy, async_blocking=async_blocking)
    own, pieces = _shares(n)
    ctx = _mp_context()
    with ProcessPoolExecutor(max_workers=n - 1, mp_context=ctx) as pool:
        futures = [pool.submit(_bucket_facts, str(store.db.path), set_name, b, policy, async_blocking) for b in pieces]
        with no_cyclic_gc():
            out = rows_facts(store.iter_trace_rows(set_name, buckets=own), policy=policy, async_blocking=async_blocking)
            for fut in futures:
                # our own worker processes wrote these bytes
                out.extend(facts_from_tuple(t) for t in marshal.loads(fut.result()))  # noqa: S302
    return out
