"""Text renderers of the verify family: a gate result (console table, JUnit XML, markdown, GitHub annotations), a
comparison (table, markdown) and a diagnosis (text, markdown).

All take the typed results of :func:`tailscope.gate`, :func:`tailscope.compare` and :func:`tailscope.diagnose` and
return strings; the caller decides where they go (stdout, a file, ``$GITHUB_STEP_SUMMARY``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tailscope.verify.bootstrap import DiffCI
from tailscope.verify.checklist import Checklist
from tailscope.verify.compare import ComparisonResult
from tailscope.verify.contract import LATENCY_METRICS
from tailscope.verify.diagnose import Diagnosis
from tailscope.verify.evaluate import CheckResult, GateResult, Verdict

# -- gate ----------------------------------------------------------------------------------------------------------

_MARK = {Verdict.PASS: "PASS", Verdict.FAIL: "FAIL", Verdict.INCONCLUSIVE: "INCONCLUSIVE", Verdict.MISSING: "MISSING"}
_EMOJI = {Verdict.PASS: "✅", Verdict.FAIL: "❌", Verdict.INCONCLUSIVE: "⚠️", Verdict.MISSING: "❔"}


def _observed(c: CheckResult) -> str:
    if c.observed is None:
        return "—"
    if c.unit == "%":
        return f"{c.observed * 100:+.1f}%"
    if c.unit == "ms":
        return f"{c.observed:.1f} ms"
    if c.unit == "fraction":
        return f"{c.observed:.4g}"
    return f"{c.observed:.4g} {c.unit}"


def _ci(c: CheckResult) -> str:
    if c.ci is None:
        return ""
    if c.unit == "%" and c.ci.rel_low is not None and c.ci.rel_high is not None:
        return f"[{c.ci.rel_low * 100:+.1f}%, {c.ci.rel_high * 100:+.1f}%]"
    return f"[{c.ci.diff_low:+.4g}, {c.ci.diff_high:+.4g}]"


def _headline(result: GateResult) -> str:
    counts = ", ".join(f"{result.count(v)} {v.value}" for v in Verdict if result.count(v))
    base = f" vs baseline {result.baseline_id}" if result.baseline_id else ""
    return f"gate {result.contract!r} on run {result.run_id}{base}: {result.verdict.upper()} ({counts or 'no checks'})"


def gate_text(result: GateResult) -> str:
    """Plain-text table: check, observed, limit, interval, verdict — then one line per non-passing check."""
    rows = [("check", "observed", "limit", "CI", "verdict")]
    rows += [(c.name, _observed(c), c.limit, _ci(c), _MARK[c.verdict]) for c in result.checks]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for c in result.checks:
        if c.verdict is not Verdict.PASS:
            lines.append(f"{_MARK[c.verdict]}: {c.name}: {c.detail}")
    lines.extend(f"note: {n}" for n in result.notes)
    if result.strict and result.count(Verdict.INCONCLUSIVE):
        lines.append("--strict: inconclusive checks fail the gate")
    lines.append(_headline(result))
    return "\n".join(lines) + "\n"


def gate_junit(result: GateResult) -> str:
    """JUnit XML: one ``<testsuite>`` for the contract, one ``<testcase>`` per check.

    ``fail`` → ``<failure>``; ``missing`` → ``<error>``; ``inconclusive`` → ``<skipped>`` (``<failure>`` when strict).
    """
    fails = result.count(Verdict.FAIL) + (result.count(Verdict.INCONCLUSIVE) if result.strict else 0)
    skipped = 0 if result.strict else result.count(Verdict.INCONCLUSIVE)
    suite = ET.Element(
        "testsuite",
        {
            "name": f"tailscope gate: {result.contract}",
            "tests": str(len(result.checks)),
            "failures": str(fails),
            "errors": str(result.count(Verdict.MISSING)),
            "skipped": str(skipped),
        },
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "run", "value": result.run_id})
    if result.baseline_id:
        ET.SubElement(props, "property", {"name": "baseline", "value": result.baseline_id})
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", {"classname": f"tailscope.gate.{c.kind}", "name": c.name})
        message = f"observed {_observed(c)}, limit {c.limit}"
        if c.verdict is Verdict.FAIL or (c.verdict is Verdict.INCONCLUSIVE and result.strict):
            el = ET.SubElement(case, "failure", {"message": message, "type": c.verdict.value})
            el.text = c.detail
        elif c.verdict is Verdict.MISSING:
            el = ET.SubElement(case, "error", {"message": c.detail, "type": "missing"})
        elif c.verdict is Verdict.INCONCLUSIVE:
            ET.SubElement(case, "skipped", {"message": c.detail})
        out = ET.SubElement(case, "system-out")
        out.text = c.detail
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def gate_markdown(result: GateResult) -> str:
    """A markdown summary for CI pages (e.g. appended to ``$GITHUB_STEP_SUMMARY``)."""
    lines = [f"### {_EMOJI[_overall(result)]} {_md_cell(_headline(result))}", ""]
    lines.append("| | check | observed | limit | CI | detail |")
    lines.append("|---|---|---|---|---|---|")
    for c in result.checks:
        lines.append(
            f"| {_EMOJI[c.verdict]} | `{_md_cell(c.name)}` | {_md_cell(_observed(c))} | {_md_cell(c.limit)} | "
            f"{_md_cell(_ci(c))} | {_md_cell(c.detail)} |"
        )
    for n in result.notes:
        lines.append(f"\n> note: {_md_cell(n)}")
    return "\n".join(lines) + "\n"


def _overall(result: GateResult) -> Verdict:
    return {0: Verdict.PASS, 1: Verdict.FAIL, 2: Verdict.MISSING}[result.exit_code]


def _gh_escape(text: str, *, prop: bool = False) -> str:
    out = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        out = out.replace(":", "%3A").replace(",", "%2C")
    return out


def gate_github(result: GateResult, *, contract_path: str | None = None) -> str:
    """GitHub Actions workflow commands: ``::error`` per failing check, ``::warning`` per inconclusive or missing one.

    With ``contract_path`` the annotations point at the contract line that declared the check.
    """
    lines: list[str] = []
    for c in result.checks:
        if c.verdict is Verdict.PASS:
            continue
        level = (
            "error" if c.verdict is Verdict.FAIL or (result.strict and c.verdict is Verdict.INCONCLUSIVE) else "warning"
        )
        props = [f"title={_gh_escape(f'{c.name} {c.verdict.value}', prop=True)}"]
        if contract_path and c.line:
            props = [f"file={_gh_escape(contract_path, prop=True)}", f"line={c.line}", *props]
        lines.append(f"::{level} {','.join(props)}::{_gh_escape(c.detail)}")
    if result.exit_code == 0:
        lines.append(f"::notice title=tailscope gate passed::{_gh_escape(_headline(result))}")
    return "\n".join(lines) + "\n"


# -- compare -------------------------------------------------------------------------------------------------------


def _fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric in LATENCY_METRICS:
        return f"{v:.1f}"
    return f"{v:.4g}"


def _fmt_diff(metric: str, d: DiffCI | None, direction: str) -> str:
    if d is None:
        return "—"
    mark = {"worse": " * worse", "better": " * better", "same": ""}[direction]
    if d.rel is not None and d.rel_low is not None and d.rel_high is not None:
        return f"{d.rel * 100:+.1f}% [{d.rel_low * 100:+.1f}, {d.rel_high * 100:+.1f}]{mark}"
    return f"{d.diff:+.4g} [{d.diff_low:+.4g}, {d.diff_high:+.4g}]{mark}"


def compare_text(cmp: ComparisonResult) -> str:
    """One table: metric, each run's value, and each later run's change vs the first with its CI and a mark."""
    short = [rid if len(rid) <= 24 else rid[:23] + "…" for rid in cmp.run_ids]
    header = ["metric", *short] + [f"Δ {s} vs {short[0]}" for s in short[1:]]
    rows = [header]
    for r in cmp.rows:
        cells = [r.label] + [_fmt_value(r.metric, v) for v in r.values]
        cells += [_fmt_diff(r.metric, d, r.direction(i)) for i, d in enumerate(r.diffs)]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"latencies in ms; Δ = relative change with its {cmp.confidence * 100:g}% bootstrap CI "
        f"({cmp.resamples} resamples); * = significant (CI excludes 0)"
    )
    if cmp.usd_per_million_output_tokens:
        costs = ", ".join(
            f"{rid} {'—' if c is None else f'{c:,.4f}'}"
            for rid, c in zip(short, cmp.usd_per_million_output_tokens, strict=True)
        )
        lines.append(f"$ per 1M output tokens: {costs}")
    return "".join(f"⚠ {w}\n" for w in cmp.warnings) + "\n".join(lines) + "\n"


def compare_markdown(cmp: ComparisonResult) -> str:
    """The comparison table as markdown (e.g. for a pull-request comment)."""
    header = ["metric", *[f"`{r}`" for r in cmp.run_ids]] + [f"Δ `{r}`" for r in cmp.run_ids[1:]]
    lines = [f"> ⚠ {w}" for w in cmp.warnings] + ([""] if cmp.warnings else [])
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in cmp.rows:
        cells = [f"`{r.label}`"] + [_fmt_value(r.metric, v) for v in r.values]
        for i, d in enumerate(r.diffs):
            text = _fmt_diff(r.metric, d, r.direction(i))
            cells.append(f"**{text}**" if r.direction(i) == "worse" else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Latencies in ms; Δ = relative change vs `{cmp.run_ids[0]}` with its {cmp.confidence * 100:g}% bootstrap "
        "interval; * = significant (the interval excludes 0)."
    )
    if cmp.usd_per_million_output_tokens:
        costs = ", ".join(
            f"`{rid}` {'—' if c is None else f'{c:,.4f}'}"
            for rid, c in zip(cmp.run_ids, cmp.usd_per_million_output_tokens, strict=True)
        )
        lines.append(f"$ per 1M output tokens: {costs}.")
    return "\n".join(lines) + "\n"


# -- diagnose ------------------------------------------------------------------------------------------------------


_TREE_MARK = {"yes": "✔ yes    ", "no": "✘ no     ", "unknown": "? unknown"}


def trees_text(diagnosis: Diagnosis, *, all_trees: bool = False) -> str:
    """The method's troubleshooting trees walked on the run: symptoms shown, each branch's verdict and evidence.

    Only the symptoms the run shows unless ``all_trees``; the others are named on one line.
    """
    if not diagnosis.trees:
        return ""
    shown = [t for t in diagnosis.trees if all_trees or t.present]
    rest = [t for t in diagnosis.trees if t not in shown]
    lines = ["Troubleshooting trees (the method's tables: symptom → checks → verdict from this run)", ""]
    for t in shown:
        state = "present" if t.present else "absent" if t.present is False else "cannot tell"
        lines.append(f"■ {t.title}  [{t.symptom}: {state}]  ({t.source})")
        lines.append(f"  {t.evidence}")
        for b in t.branches:
            lines.append(f"  {_TREE_MARK.get(b.verdict, b.verdict)}  {b.check}")
            lines.append(f"               {b.evidence}")
            if b.verdict == "yes":
                lines.append(f"               → {b.remedy}")
        lines.append("")
    if rest:
        lines.append(
            "not shown by this run: "
            + ", ".join(f"{t.symptom} ({'absent' if t.present is False else 'cannot tell'})" for t in rest)
            + " — `--all-trees` walks them too"
        )
        lines.append("")
    return "\n".join(lines)


def findings_text(diagnosis: Diagnosis, *, all_trees: bool = False) -> str:
    """Plain-text report of a run's findings, then the troubleshooting trees."""
    findings, run_id, rules = diagnosis.findings, diagnosis.run_id, diagnosis.rules
    trees = trees_text(diagnosis, all_trees=all_trees)
    if not findings:
        return f"run {run_id}: no findings — none of the {len(rules)} rules triggered ({', '.join(rules)}).\n" + (
            f"\n{trees}" if trees else ""
        )
    lines = [f"run {run_id}: {len(findings)} finding{'s' if len(findings) != 1 else ''}, highest impact first", ""]
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. {f.title}  [{f.rule}, impact {f.impact:.2f}]")
        lines.append(f"   symptom:  {f.symptom}")
        for e in f.evidence:
            lines.append(f"   evidence: {e}")
        lines.append(f"   cause:    {f.cause}")
        for a in f.actions:
            lines.append(f"   action:   {a}")
        lines.append("")
    return "\n".join(lines) + ("\n" + trees if trees else "")


def findings_markdown(diagnosis: Diagnosis) -> str:
    """Findings as markdown (for CI summaries next to the gate's table)."""
    findings, run_id = diagnosis.findings, diagnosis.run_id
    if not findings:
        return f"#### Diagnosis of run `{run_id}`: no findings\n"
    lines = [f"#### Diagnosis of run `{run_id}`: {len(findings)} finding{'s' if len(findings) != 1 else ''}", ""]
    for f in findings:
        lines.append(f"**{f.title}** (impact {f.impact:.2f}) — {f.symptom}")
        lines.append("")
        lines.extend(f"- {e}" for e in f.evidence)
        lines.append(f"- *likely cause:* {f.cause}")
        lines.append("")
        lines.append("Next:")
        lines.extend(f"1. {a}" for a in f.actions)
        lines.append("")
    return "\n".join(lines)


_ITEM_MARK = {"evidenced": "✔", "attested": "✎", "missing": "✘"}


def checklist_text(result: Checklist) -> str:
    """``tailscope checklist``: each item with its mark, status and evidence (what counts, when missing)."""
    lines = ["Pre-launch checklist (the method, article 003 §5.1)", ""]
    for i, item in enumerate(result.items, 1):
        lines.append(f"{_ITEM_MARK.get(item.status, '?')} {i:>2}. {item.title}  [{item.id}: {item.status}]")
        lines.append(f"       {item.evidence}")
        if item.status == "missing":
            lines.append(f"       counts: {item.counts}")
    done = len(result.items) - len(result.missing)
    lines.append("")
    lines.append(
        f"{done} of {len(result.items)} items evidenced or attested"
        + (f"; missing: {', '.join(i.id for i in result.missing)}" if result.missing else " — ready to launch")
    )
    return "\n".join(lines)
