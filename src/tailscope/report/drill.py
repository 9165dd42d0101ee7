"""A drill's outputs: the console table, JUnit XML (one testcase per expectation) and markdown.

Receives the result's document (:meth:`tailscope.api.drill.DrillResult.to_dict`); computes nothing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _window_rows(d: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for w in d["windows"]:
        rows.append(
            [
                w["name"],
                f"{w['start_s']:.1f}–{w['end_s']:.1f} s",
                str(w["requests"]),
                f"{w['error_rate']:.1%}",
                _ms(w["e2e_p95_ms"]),
                _ms(w["ttft_p95_ms"]),
            ]
        )
    return rows


_HEAD = ["window", "sent", "requests", "errors", "E2E p95 ms", "TTFT p95 ms"]


def drill_text(d: Mapping[str, Any]) -> str:
    """The console view: windows, timeline, checks, verdict."""
    f = d["fault"]
    lines = [f"drill {d['name']}: {f['kind']} at {f['at_s']:g} s for {f['for_s']:g} s against {d['target']}"]
    rows = [_HEAD, *_window_rows(d)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    for r in rows:
        lines.append("  " + "  ".join(c.rjust(widths[i]) if i else c.ljust(widths[i]) for i, c in enumerate(r)))
    for e in d["timeline"]:
        lines.append(f"  {e['t_s']:6.2f} s  {e['event']}" + (f" ({e['detail']})" if e["detail"] else ""))
    if d.get("fallbacks") is not None:
        lines.append(f"  fallback answers: {d['fallbacks']}")
    if d["recovery_s"] is None:
        lines.append("  recovery: not within the drill")
    for c in d["checks"]:
        mark = "PASS" if c["passed"] else "FAIL"
        sign = "≥" if c["name"].endswith("_min") else "≤"
        lines.append(f"  {mark}  {c['name']} {sign} {c['limit']:g}: {c['detail']}")
    for p in d.get("problems", ()):
        lines.append(f"  FAIL  {p}")
    if not d.get("timing_judged", True):
        lines.append("  (latency and recovery not judged: timing=False)")
    lines.append(f"drill {'passed' if d['passed'] else 'FAILED'}" + (f" (run {d['run_id']})" if d["run_id"] else ""))
    return "\n".join(lines) + "\n"


def drill_junit(d: Mapping[str, Any]) -> str:
    """JUnit XML: one ``<testsuite>`` for the drill, one ``<testcase>`` per expectation."""
    checks = list(d["checks"])
    problems = list(d.get("problems", ()))
    suite = ET.Element(
        "testsuite",
        {
            "name": f"tailscope drill: {d['name']}",
            "tests": str(len(checks) + len(problems)),
            "failures": str(sum(1 for c in checks if not c["passed"])),
            "errors": str(len(problems)),
        },
    )
    props = ET.SubElement(suite, "properties")
    for name in ("target", "run_id", "recovery_s"):
        if d.get(name) is not None:
            ET.SubElement(props, "property", {"name": name, "value": str(d[name])})
    for c in checks:
        case = ET.SubElement(suite, "testcase", {"classname": "tailscope.drill", "name": c["name"]})
        if not c["passed"]:
            el = ET.SubElement(case, "failure", {"message": f"observed {c['observed']}, limit {c['limit']}"})
            el.text = c["detail"]
        ET.SubElement(case, "system-out").text = c["detail"]
    for p in problems:
        case = ET.SubElement(suite, "testcase", {"classname": "tailscope.drill", "name": "fault"})
        ET.SubElement(case, "error", {"message": p})
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def drill_markdown(d: Mapping[str, Any]) -> str:
    """A markdown summary: verdict, windows, timeline, checks."""
    f = d["fault"]
    out = [
        f"### Drill {d['name']}: {'✅ passed' if d['passed'] else '❌ failed'}",
        "",
        f"`{f['kind']}` at {f['at_s']:g} s for {f['for_s']:g} s against `{d['target']}`"
        + (f" (run `{d['run_id']}`)" if d["run_id"] else ""),
        "",
        "| " + " | ".join(_HEAD) + " |",
        "|" + "---|" * len(_HEAD),
    ]
    out += ["| " + " | ".join(r) + " |" for r in _window_rows(d)]
    out += ["", "| t (s) | event | detail |", "|---|---|---|"]
    out += [f"| {e['t_s']:.2f} | {e['event']} | {e['detail']} |" for e in d["timeline"]]
    out += ["", "| check | limit | observed | verdict |", "|---|---|---|---|"]
    out += [
        f"| {c['name']} | {c['limit']:g} | {c['observed'] if c['observed'] is not None else '—'} | "
        f"{'pass' if c['passed'] else 'fail'} |"
        for c in d["checks"]
    ]
    out += [f"| fault | | {p} | fail |" for p in d.get("problems", ())]
    return "\n".join(out) + "\n"
