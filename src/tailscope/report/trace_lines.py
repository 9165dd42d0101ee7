"""Plain-text lines of ``trace ingest``, ``collect``, ``demo``, ``sets`` and ``delete`` (no rich: these commands
print text, and start faster without importing it)."""

from __future__ import annotations

from typing import Any


def ingest_lines(report: Any, files: int, set_name: str, set_spans: int, set_traces: int) -> tuple[list[str], str]:
    """``trace ingest``: the first 20 problems as warnings (and how many more), then the line saying what was
    loaded."""
    warnings = [f"warning: {problem}" for problem in report.problems[:20]]
    if report.problem_count > 20:
        warnings.append(f"warning: … and {report.problem_count - 20} more problems")
    done = (
        f"loaded {report.spans} spans from {files} file(s) into set {set_name!r} ({set_spans} spans, {set_traces} "
        "traces in the set)" + (f"; {report.problem_count} problem(s) reported" if report.problem_count else "")
    )
    return warnings, done


def sets_lines(sets: list[Any]) -> list[str]:
    """The trace sets with their span and trace counts, one plain line each under a header (easy to grep)."""
    width = max(3, *(len(s.name) for s in sets))
    lines = [f"{'set':<{width}}  {'spans':>12}  {'traces':>10}  updated               source"]
    for s in sets:
        lines.append(f"{s.name:<{width}}  {s.spans:>12,}  {s.traces:>10,}  {s.updated_at[:19]:<20}  {s.source}")
    return lines


def collect_line(got: Any) -> str:
    """``trace collect``: what was received (and rejected)."""
    rejected = f", rejected {got.rejected}" if got.rejected else ""
    return f"received {got.received} spans in {got.requests} request(s){rejected}"


def demo_lines(paths: list[Any], out: Any, traces: int) -> list[str]:
    """``trace demo``: each file written, then the commands that use them."""
    return [f"wrote {path} ({traces} traces, OTLP JSON lines)" for path in paths] + [
        f"next: tailscope trace ingest {out}/before.otlp.json --set before && tailscope trace ingest "
        f"{out}/after.otlp.json --set after && tailscope trace analyze --set before && "
        "tailscope trace diff --before before --after after"
    ]


def delete_line(gone: list[Any]) -> str:
    """``trace delete``: the sets deleted with their sizes."""
    return "deleted " + ", ".join(f"{s.name!r} ({s.spans:,} spans, {s.traces:,} traces)" for s in gone)
