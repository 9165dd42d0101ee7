"""Synthetic agent traces with known waterfalls, for trying ``tailscope trace`` and for benchmarks: as spans in memory
(:func:`demo_traces`), as an OTLP JSON document (:func:`spans_to_otlp_json`), or written as the two files of
``tailscope trace demo`` (:func:`write_demo_traces`).

Each trace is a chat request through a gateway into an agent: a planning model call, three tool calls (a knowledge
base search over a vector store, an order lookup in Postgres, a user lookup over HTTP) and an answering model call,
sometimes retried after an error; in ``sequential_share`` of the traces the tools run one after another.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tailscope.api._support import PathLike, public
from tailscope.errors import ConfigError
from tailscope.files import make_folder
from tailscope.records import Span

#: spans per OTLP JSON line in the files :func:`write_demo_traces` writes
_LINE_SPANS = 2000


def _share(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ConfigError(f"{name} must be within [0, 1] (got {value!r})")


@public
def demo_traces(
    traces: int = 2000,
    *,
    seed: int = 7,
    sequential_share: float = 0.63,
    tool_scale: float = 1.0,
    extra_calls: int = 0,
    retry_rate: float = 0.08,
) -> Iterator[list[Span]]:
    """Synthetic agent traces, one list of spans per trace, generated lazily (one trace starts every 50 ms).

    The same arguments give the same traces. A trace has 11 spans (12 when the answering call is retried);
    ``extra_calls`` adds that many cache calls to each of the three tools (``extra_calls=3``: 20 spans, or 21).

    Args:
        traces: how many traces (≥ 1).
        seed: the random source's seed.
        sequential_share: probability (0–1) that a trace's three tool calls run one after another rather than
            concurrently — the waterfall ``trace analyze`` finds.
        tool_scale: multiplies the tools' backend latencies (> 0).
        extra_calls: cache calls added to each tool (≥ 0; more spans per trace, for load on the trace pipeline).
        retry_rate: probability (0–1) that the answering model call fails once and is retried.

    Raises:
        ConfigError: an argument out of its range.
    """
    from tailscope.trace.demo import demo_traces as generate

    if traces < 1:
        raise ConfigError(f"traces must be ≥ 1 (got {traces})")
    if extra_calls < 0:
        raise ConfigError(f"extra_calls must be ≥ 0 (got {extra_calls})")
    if not tool_scale > 0:
        raise ConfigError(f"tool_scale must be > 0 (got {tool_scale!r})")
    _share("sequential_share", sequential_share)
    _share("retry_rate", retry_rate)
    return generate(
        traces, seed=seed, sequential_share=sequential_share, tool_scale=tool_scale, extra_calls=extra_calls,
        retry_rate=retry_rate,
    )  # fmt: skip


@public
def spans_to_otlp_json(spans: Sequence[Span]) -> dict[str, Any]:
    """Spans as one OTLP/JSON ``ExportTraceServiceRequest`` document (one resource per service; ids as hex, times as
    nanosecond strings), the shape ``ingest_traces`` and the OpenTelemetry collector's file exporter read.

    Span links and the layer are not written (the layer is classified again when the document is ingested).
    ``json.dumps`` of the result, one document per line, is an OTLP JSON lines file.
    """
    from tailscope.trace.demo import to_otlp_json

    return to_otlp_json(list(spans))


@public
def write_demo_traces(out: PathLike, *, traces: int = 2000, seed: int = 7) -> list[Path]:
    """Write synthetic agent traces with known waterfalls: ``before.otlp.json`` (tools one after another in 63 % of
    traces) and ``after.otlp.json`` (parallelised, but the knowledge-base backend 1.6× slower), as OTLP JSON lines.

    Raises:
        ConfigError: ``traces`` < 1, or ``out`` cannot be a folder.
    """
    if traces < 1:
        raise ConfigError(f"--traces must be ≥ 1 (got {traces})")
    folder = Path(out)
    make_folder(folder, "--out")
    # name → (sequential share, tool scale)
    variants = {"before": (0.63, 1.0), "after": (0.05, 1.6)}
    written = []
    for name, (sequential, scale) in variants.items():
        path = folder / f"{name}.otlp.json"
        with open(path, "w", encoding="utf-8") as fh:
            batch: list[Span] = []
            generated = demo_traces(
                traces, seed=seed + (name == "after"), sequential_share=sequential, tool_scale=scale
            )
            for spans in generated:
                batch.extend(spans)
                if len(batch) >= _LINE_SPANS:
                    fh.write(json.dumps(spans_to_otlp_json(batch), separators=(",", ":")) + "\n")
                    batch = []
            if batch:
                fh.write(json.dumps(spans_to_otlp_json(batch), separators=(",", ":")) + "\n")
        written.append(path)
    return written
