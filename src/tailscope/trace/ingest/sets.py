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
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from tailscope.records import Span
from tailscope.store.spans import SpanRow, SpanStore, rows_to_spans, write_rows_files
from tailscope.trace.facts import TraceFacts, facts_from_tuple, facts_to_tuple, trace_facts
from tailscope.trace.fastfacts import facts_from_rows
from tailscope.trace.ingest.common import ParseContext, Problem
from tailscope.trace.ingest.files import iter_file_rows
from tailscope.trace.layers import LayerRule
from tailscope.trace.tree import build_tree

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
    """Worker processes to use: the CPU count, at most 8."""
    return max(1, min(os.cpu_count() or 1, 8))


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


def _parse_to_batch(
    path: str, fmt: str, rules: Sequence[LayerRule], out: str
) -> tuple[int, list[Problem], int, list[str]]:
    ctx = ParseContext(source=path, rules=rules)
    with no_cyclic_gc():
        n, files = write_rows_files(Path(out), iter_file_rows(path, fmt, ctx))
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

    Args:
        store: the span store.
        set_name: the set to add to.
        paths: trace files.
        fmt: ``auto`` or a format name (see :data:`tailscope.trace.ingest.files.FORMATS`).
        rules: user layer rules.
        workers: worker processes (default: CPU count when the files are large, else 1).
    """
    report = IngestReport()
    source = ", ".join(str(p) for p in paths)[:500]
    size = 0
    for p in paths:
        with contextlib.suppress(OSError):
            size += os.path.getsize(p)
    n_workers = workers if workers is not None else (default_workers() if size >= PARALLEL_MIN_BYTES else 1)
    n_workers = min(n_workers, len(paths))
    if n_workers > 1:
        files: list[Path] = []
        stems = [store.batch_path(f"w{k}-") for k in range(len(paths))]
        try:
            ctx = _mp_context()
            with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
                futures = [
                    pool.submit(_parse_to_batch, str(p), fmt, tuple(rules), str(o))
                    for p, o in zip(paths, stems, strict=True)
                ]
                for p, fut in zip(paths, futures, strict=True):
                    n, problems, dropped, written = fut.result()
                    files.extend(Path(f) for f in written)
                    report.files[str(p)] = n
                    report.spans += n
                    report.problems.extend(problems)
                    report.problem_count += dropped
            store.fold(set_name, files, source=source)
        finally:
            for stem in stems:  # also the files of a worker that failed half-way
                for f in stem.parent.glob(f"{stem.name}.*.json"):
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()
        return report

    def rows() -> Iterator[dict[str, Any]]:
        for path in paths:
            ctx = ParseContext(source=str(path), rules=rules)
            n = 0
            for row in iter_file_rows(path, fmt, ctx):
                n += 1
                yield row
            report.files[str(path)] = n
            report.problems.extend(ctx.problems)
            report.problem_count += ctx.dropped

    with no_cyclic_gc():
        report.spans = store.write_rows(set_name, rows(), source=source)
    return report


def facts_of(
    traces: Iterable[list[Span]], *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stream of traces (each a list of spans of one trace)."""
    return [trace_facts(build_tree(t), policy=policy, async_blocking=async_blocking) for t in traces]


def rows_facts(
    traces: Iterable[list[SpanRow]], *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stream of traces as store rows (the fast path for the default policy)."""
    if policy == "jaeger":
        return facts_of((rows_to_spans(t) for t in traces), policy=policy, async_blocking=async_blocking)
    return [facts_from_rows(t, async_blocking=async_blocking) for t in traces]


#: Hash buckets of trace ids that the processes of :func:`set_facts` share out.
FACT_BUCKETS = 1000
#: Pieces each worker's share is cut into, so the main process decodes early pieces while later ones are computed.
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
