"""Console rendering of imported runs (``runs import``, ``runs show`` of an import) and of ``translate``.

Consumes prepared dicts only: the run's ``settings["import"]`` block, the tool-dialect summary of its records and
tailscope's summary.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tailscope.units import format_ms

_TOOL_NAMES = {"vllm": "vllm bench serve", "guidellm": "GuideLLM", "aiperf": "AIPerf"}
_METRICS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("icl_ms", "ICL"), ("e2e_ms", "E2E"))


def _pct(stats: Any, key: str) -> str:
    if not isinstance(stats, dict):
        return "—"
    value = stats.get(key)
    if value is None and key == "p50":
        value = stats.get("median")
    return format_ms(value) if isinstance(value, int | float) else "—"


def import_renderable(
    info: dict[str, Any], dialect: dict[str, Any] | None = None, summary: dict[str, Any] | None = None
) -> Group:
    """What the tool reported, the same figures recomputed from the imported records in the tool's own definitions,
    tailscope's figures, then how the tool defines its metrics and what the import approximated."""
    tool = str(info.get("tool", ""))
    name = _TOOL_NAMES.get(tool, tool)
    reported = info.get("reported") or {}
    names = (dialect or {}).get("names") or {}
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    t.add_column("metric")
    t.add_column(f"{name} reported p50 / p99", justify="right")
    t.add_column(f"from records, {tool}'s way", justify="right")
    t.add_column("tailscope p50 / p99", justify="right")
    for key, label in _METRICS:
        theirs = (reported.get("metrics") or {}).get(key)
        mine = ((dialect or {}).get("metrics") or {}).get(key)
        ours = (summary or {}).get(key)
        if theirs is None and mine is None and ours is None:
            continue
        t.add_row(
            f"{label} ({names.get(key, label)})",
            f"{_pct(theirs, 'p50')} / {_pct(theirs, 'p99')}",
            f"{_pct(mine, 'median')} / {_pct(mine, 'p99')}",
            f"{_pct(ours, 'p50')} / {_pct(ours, 'p99')}",
        )
    req = (dialect or {}).get("requests") or {}
    head = Text(
        f"imported from {name}: {info.get('file', '')}\n"
        f"completed {reported.get('completed', '—')} reported, {req.get('completed', '—')} in the records; failed "
        f"{reported.get('failed', '—')} reported, {req.get('failed', '—')} in the records",
    )
    lines: list[Any] = [head, t, Text("How " + name + " defines its metrics:", style="bold")]
    lines += [Text(f"  - {s}") for s in info.get("semantics") or []]
    if info.get("notes"):
        lines.append(Text("Import notes:", style="bold"))
        lines += [Text(f"  - {s}") for s in info["notes"]]
    return Group(*lines)


def print_imported(con: Any, runs: Any) -> None:
    """``tailscope runs import``: each imported run's headline, then :func:`import_renderable`."""
    for r in runs:
        con.print(f"[bold]run {r.run.id}[/]  import  {len(r.records)} requests  model {r.run.target.model}")
        con.print(import_renderable(r.run.settings["import"], r.dialect, r.summary))


def translation_text(
    tool: str, profile_yaml: str, command: str, differences: list[str], ignored: list[str], out: str | None
) -> str:
    """The translated profile (unless written to a file), the command that runs it, every difference and what
    was ignored."""
    parts = []
    if out is None:
        parts += [f"# tailscope profile translated from {_TOOL_NAMES.get(tool, tool)}", profile_yaml.rstrip(), ""]
    else:
        parts.append(f"wrote {out}")
    parts += [f"run it: {command}", "", "semantic differences:"]
    parts += [f"  - {d}" for d in differences]
    if ignored:
        parts += ["ignored (output or display only):"] + [f"  - {i}" for i in ignored]
    return "\n".join(parts) + "\n"
