"""Glue between files, the store and the pure analyses: ingest files into a set, compute a set's facts.

Both steps use worker processes for large inputs (parsing is per file; facts are per hash partition of trace ids,
each worker reading its partition from the store read-only), because parsing and tree walking are CPU-bound Python.
Small inputs stay in-process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.records import Span
from tailscope.store.spans import SpanStore, write_batch_file
from tailscope.trace.facts import TraceFacts, trace_facts
from tailscope.trace.ingest.common import ParseContext, Problem
from tailscope.trace.ingest.files import iter_file
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


def _parse_to_batch(path: str, fmt: str, rules: Sequence[LayerRule], out: str) -> tuple[int, list[Problem], int]:
    ctx = ParseContext(source=path, rules=rules)
    n = write_batch_file(Path(out), iter_file(path, fmt, ctx))
    return n, ctx.problems, ctx.dropped


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
        outs = [store.batch_path(f"w{k}-") for k in range(len(paths))]
        try:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
                futures = [
                    pool.submit(_parse_to_batch, str(p), fmt, tuple(rules), str(o))
                    for p, o in zip(paths, outs, strict=True)
                ]
                for p, fut in zip(paths, futures, strict=True):
                    n, problems, dropped = fut.result()
                    report.files[str(p)] = n
                    report.spans += n
                    report.problems.extend(problems)
                    report.problem_count += dropped
            store.fold(set_name, outs, source=source)
        finally:
            for o in outs:
                with contextlib.suppress(FileNotFoundError):
                    o.unlink()
        return report

    def spans() -> Iterator[Span]:
        for path in paths:
            ctx = ParseContext(source=str(path), rules=rules)
            n = 0
            for span in iter_file(path, fmt, ctx):
                n += 1
                yield span
            report.files[str(path)] = n
            report.problems.extend(ctx.problems)
            report.problem_count += ctx.dropped

    report.spans = store.write(set_name, spans(), source=source)
    return report


def facts_of(
    traces: Iterable[list[Span]], *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stream of traces (each a list of spans of one trace)."""
    return [trace_facts(build_tree(t), policy=policy, async_blocking=async_blocking) for t in traces]


def _partition_facts(
    db_path: str, set_name: str, k: int, n: int, policy: str, async_blocking: bool
) -> list[TraceFacts]:
    store = SpanStore(db_path)
    return facts_of(store.iter_traces(set_name, partition=(k, n)), policy=policy, async_blocking=async_blocking)


def set_facts(
    store: SpanStore,
    set_name: str,
    *,
    policy: str = "default",
    async_blocking: bool = False,
    workers: int | None = None,
) -> list[TraceFacts]:
    """Per-trace facts of a stored set, streamed from the store trace by trace (in worker processes when large).

    The order of the returned facts is by trace id within each partition; analyses do not depend on it.
    """
    info = store.get_set(set_name)
    n = workers if workers is not None else (default_workers() if info.spans >= PARALLEL_MIN_SPANS else 1)
    if n <= 1:
        return facts_of(store.iter_traces(set_name), policy=policy, async_blocking=async_blocking)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        futures = [
            pool.submit(_partition_facts, str(store.db.path), set_name, k, n, policy, async_blocking) for k in range(n)
        ]
        out: list[TraceFacts] = []
        for fut in futures:
            out.extend(fut.result())
    return out
