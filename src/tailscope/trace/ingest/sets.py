"""Glue between files, the store and the pure analyses: ingest files into a set, compute a set's facts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.records import Span
from tailscope.store.spans import SpanStore
from tailscope.trace.facts import TraceFacts, trace_facts
from tailscope.trace.ingest.common import ParseContext, Problem
from tailscope.trace.ingest.files import iter_file
from tailscope.trace.layers import LayerRule
from tailscope.trace.tree import build_tree


@dataclass(slots=True)
class IngestReport:
    """What an ingest did: spans loaded per file and the problems found."""

    spans: int = 0
    files: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0


def ingest_paths(
    store: SpanStore,
    set_name: str,
    paths: Sequence[str | Path],
    *,
    fmt: str = "auto",
    rules: Sequence[LayerRule] = (),
) -> IngestReport:
    """Parse trace files and append their spans to a set; bad input is reported, good spans still load."""
    report = IngestReport()

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

    report.spans = store.write(set_name, spans(), source=", ".join(str(p) for p in paths)[:500])
    return report


def facts_of(
    traces: Iterable[list[Span]], *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stream of traces (each a list of spans of one trace)."""
    return [trace_facts(build_tree(t), policy=policy, async_blocking=async_blocking) for t in traces]


def set_facts(
    store: SpanStore, set_name: str, *, policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a stored set, streamed from the store trace by trace."""
    return facts_of(store.iter_traces(set_name), policy=policy, async_blocking=async_blocking)
