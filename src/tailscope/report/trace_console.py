"""Console rendering of traces: one trace's tree, a set's analysis, a diff, the list of sets (prepared models only)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tailscope.units import format_ms


def print_trace(con: Console, tree: Any, cp: Any, layers: list[str]) -> None:
    """One trace's tree with its critical path marked, and notes about orphans, cycles and clock skew."""
    t0 = min((s.start_ns for s in tree.spans), default=0)
    table = Table(show_edge=False, header_style="bold", title=f"trace {tree.trace_id}  (● = on the critical path)")
    for col in ("start", "duration", "on path", "span", "layer", "service"):
        table.add_column(col, justify="right" if col in ("start", "duration", "on path") else "left")
    todo = [(r, 0) for r in reversed(tree.roots)]
    while todo:
        i, depth = todo.pop()
        s = tree.spans[i]
        excl = cp.exclusive_ns.get(s.span_id, 0)
        mark = "● " if excl else "  "
        table.add_row(
            format_ms((s.start_ns - t0) / 1e6),
            format_ms(s.duration_ns / 1e6),
            format_ms(excl / 1e6) if excl else "",
            f"{'  ' * depth}{mark}{s.name}" + (" [error]" if s.status == "ERROR" else ""),
            layers[i],
            s.service,
        )
        todo.extend((c, depth + 1) for c in reversed(tree.children[i]))
    con.print(table)
    notes = []
    if tree.orphans:
        notes.append(f"{len(tree.orphans)} orphan span(s) shown as extra roots")
    if tree.cycles_broken:
        notes.append(f"{len(tree.cycles_broken)} parent cycle(s) broken")
    skew = [o for o in tree.outside if o.skew]
    if skew:
        notes.append(f"{len(skew)} child span(s) outside their parent across services (clock skew?)")
    if cp.clipped or cp.ignored:
        notes.append(f"{len(cp.clipped)} child span(s) clipped, {len(cp.ignored)} ignored (outside the parent)")
    for n in notes:
        con.print(f"note: {n}")
    con.print(f"critical path {format_ms(cp.total_ns / 1e6)} of {format_ms(tree.duration_ns / 1e6)} ({cp.policy})")


def print_analysis(con: Console, r: dict[str, Any]) -> None:
    """A set's analysis: root operations, the tail by layer, operations, waterfalls, retries, anomalies."""
    con.print(f"[bold]{r['traces']['count']} traces, {r['traces']['spans']} spans[/bold] (set {r.get('set')})")
    t = Table(title="latency per root operation", show_edge=False, header_style="bold")
    for col in ("root operation", "traces", "p50", "p95", "p99", "max"):
        t.add_column(col, justify="left" if col == "root operation" else "right")
    for op, s in list(r["root_ops"].items())[:10]:
        t.add_row(
            op, str(s["count"]), format_ms(s["p50"]), format_ms(s["p95"]), format_ms(s["p99"]), format_ms(s["max"])
        )
    con.print(t)
    layers = r["layers"]
    if layers:
        t = Table(title="what explains the tail: critical-path time per trace by layer", show_edge=False)
        t.add_column("layer")
        for name, label in (("median_bucket", "median"), ("tail_p95_bucket", "≥ p95"), ("tail_bucket", "≥ p99")):
            t.add_column(f"{label} ({layers[name]['traces']})", justify="right")
        for layer in layers["tail_bucket"]["composition"]:
            cells = []
            for name in ("median_bucket", "tail_p95_bucket", "tail_bucket"):
                c = layers[name]["composition"].get(layer, {"ms_per_trace": 0.0, "share": 0.0})
                cells.append(f"{format_ms(c['ms_per_trace'])} {c['share'] * 100:4.0f}%")
            t.add_row(layer, *cells)
        con.print(t)
    t = Table(title="operations (by share of the p99 tail's critical path)", show_edge=False, header_style="bold")
    for col in ("operation", "spans", "mean", "self", "tail share", "median share", "gap on path", "fan-out"):
        t.add_column(col, justify="left" if col == "operation" else "right")
    for op, o in list(r["operations"].items())[:12]:
        t.add_row(
            op,
            str(o["spans"]),
            format_ms(o["mean_ms"]),
            f"{o['self_share'] * 100:.0f}%",
            f"{o['tail_bucket_share'] * 100:.1f}%",
            f"{o['median_bucket_share'] * 100:.1f}%",
            format_ms(o["gap_on_path_ms_per_trace"]),
            str(o["fanout_max"]),
        )
    con.print(t)
    n = max(r["traces"]["count"], 1)
    for w in r["waterfalls"][:5]:
        con.print(
            f"waterfall: {w['pattern']} sequential in {w['traces'] / n * 100:.0f} % of traces; "
            f"parallel would cut P99 by {format_ms(w['p99_saving_ms'])} (→ {format_ms(w['projected_p99_ms'])}), "
            f"P50 by {format_ms(w['p50_saving_ms'])}"
        )
    for rt in r["retries"][:5]:
        con.print(
            f"retries: {rt['op']} retried {rt['extra_attempts']}× in {rt['traces']} traces, "
            f"{format_ms(rt['path_cost_ms_per_trace'])} of critical path per affected trace"
        )
    if r["anomalies"]:
        con.print(
            "anomalies: " + ", ".join(f"{k} {v['count']} (in {v['traces']} traces)" for k, v in r["anomalies"].items())
        )


def print_diff(con: Console, result: dict[str, Any]) -> None:
    """Why latency moved between two sets: per root operation, the p50/p99 change and its ranked explanations."""
    for op, d in result["root_ops"].items():
        b, a = d["before"], d["after"]
        con.print(
            f"[bold]{escape(op)}[/bold]: p50 {format_ms(b['p50'])} → {format_ms(a['p50'])}, "
            f"p99 {format_ms(b['p99'])} → {format_ms(a['p99'])} ({d['delta_p99_ms']:+.1f} ms); "
            f"tail = traces ≥ {d['tail']}"
        )
        for k, e in enumerate(d["explanations"][:8], 1):
            via = f" (branch {e['branch']})" if e["branch"] != e["op"] else ""
            con.print(escape(f"  {k}. [{e['kind']}] {e['detail']}{via}"))
    for name in ("only_before", "only_after"):
        if result[name]:
            con.print(f"{name.replace('_', ' ')}: {', '.join(result[name])}")


def _parts_table(title: str, parts: dict[str, Any]) -> Table:
    table = Table(show_edge=False, header_style="bold", title=title)
    for col in ("part", "p50", "p95", "p99", "share of slow (≥ p95)"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for name, d in parts.items():
        if name == "total":
            continue
        table.add_row(name, format_ms(d["p50"]), format_ms(d["p95"]), format_ms(d["p99"]), f"{d['share_slow']:.0%}")
    total = parts.get("total")
    if total:
        cells = (format_ms(total[k]) for k in ("p50", "p95", "p99"))
        table.add_row("[bold]client-seen[/]", *cells, "")
    return table


def explain_line(what: str, ex: dict[str, Any]) -> str:
    """ "What explains the client-seen P99" in one line: the tail's parts, largest first, with their shares."""
    if not ex or not ex.get("parts"):
        return f"{what}: nothing joined"
    top = ", ".join(f"{p['part']} {p['share']:.0%} ({format_ms(p['mean_ms'])})" for p in ex["parts"][:5])
    tail = f"{format_ms(ex['client_ms'])}, {ex['requests']} request(s)"
    return f"what explains the client-seen {what} p99 ({tail}): {top}"


def print_join(con: Console, doc: dict[str, Any]) -> None:
    """A run joined with a trace set: joined counts, the parts of TTFT and E2E, what explains the P99, what failed."""
    con.print(
        f"[bold]run {doc['run']} × set {escape(doc['set'])}[/]: {doc['joined']} of {doc['requests']} requests joined"
    )
    if doc["ttft_ms"]:
        con.print(_parts_table("client-seen TTFT, taken apart (ms)", doc["ttft_ms"]))
    if doc["e2e_ms"]:
        con.print(_parts_table("client-seen E2E, taken apart (ms)", doc["e2e_ms"]))
    for what, key in (("TTFT", "explain_ttft_p99"), ("E2E", "explain_e2e_p99")):
        if doc.get(key):
            con.print(escape(explain_line(what, doc[key])))
    if doc.get("skew_suspected"):
        con.print(
            f"[yellow]clock skew suspected on {doc['skew_suspected']} request(s): the server's spans do not fit inside "
            "the client's send/receive (network set to 0, server parts scaled to the client's window)[/]"
        )
    for reason, n in doc.get("unjoined", {}).items():
        ids = [str(u["request_id"]) for u in doc.get("unjoined_requests", []) if u["reason"] == reason][:10]
        con.print(f"not joined: {n} — {escape(reason)}" + (f" (requests {', '.join(ids)}…)" if ids else ""))


#: Classes given a column of their own in the ranked fixes (the largest; the JSON has every class).
_RANK_CLASSES = 4


def print_whatif(con: Console, doc: dict[str, Any]) -> None:
    """A what-if: the changes, p50/p95/p99 before and after (with intervals), per root operation, critical-path moves,
    and with ``--rank`` the candidate fixes by P95 saving (and per class, for the largest classes) and their greedy
    order."""

    def cell(d: dict[str, Any], stat: str) -> str:
        v = d.get(f"{stat}_ms")
        if v is None:
            return "—"
        lo, hi = d.get(f"{stat}_low_ms"), d.get(f"{stat}_high_ms")
        return format_ms(v) + (f" [dim]({format_ms(lo)}–{format_ms(hi)})[/dim]" if lo is not None else "")

    def pairs(title: str, head: str, rows: dict[str, Any]) -> Table:
        table = Table(show_edge=False, header_style="bold", title=title)
        for col in (head, "", "p50", "p95", "p99"):
            table.add_column(col, justify="left" if col in (head, "") else "right")
        for op, row in rows.items():
            label = escape(op) + (f" ({row['count']})" if "count" in row else "")
            table.add_row(label, "before", *(cell(row["before"], s) for s in ("p50", "p95", "p99")))
            table.add_row("", "after", *(cell(row["after"], s) for s in ("p50", "p95", "p99")))
            sv = row["saving"]
            table.add_row("", "saving", *(format_ms(sv.get(f"{s}_ms", 0.0)) for s in ("p50", "p95", "p99")))
        return table

    changes = doc.get("changes") or []
    if changes:
        con.print("changes: " + "  ".join(escape(c["flag"]) for c in changes))
        con.print(pairs(f"{doc['traces']} traces re-timed", "root operation", doc["root_ops"]))
        if doc.get("classes"):
            con.print(pairs(f"by class ({escape(str(doc.get('class_attribute')))})", "class", doc["classes"]))
    cp = doc.get("critical_path") or {}
    if changes and cp.get("changed"):
        moves = ", ".join(f"{escape(m['from'])} → {escape(m['to'])} ({m['share']:.0%})" for m in cp["moves"][:3])
        con.print(f"critical path moved to another operation in {cp['changed_share']:.0%} of traces: {moves}")
    for w in doc.get("warnings") or []:
        con.print(f"[yellow]warning:[/yellow] {escape(w)}")
    cands = doc.get("candidates") or []
    if not cands:
        return
    by_class = doc.get("p95_before_by_class_ms") or {}
    shown = list(by_class)[:_RANK_CLASSES]  # the largest classes (the JSON has them all)
    now = format_ms(doc["p95_before_ms"])
    if shown:
        now += "; " + ", ".join(f"{escape(k)} {format_ms(by_class[k])}" for k in shown)
    con.print(f"\nranked fixes (P95 {now} now):")
    ranked = Table(show_edge=False, header_style="bold")
    class_cols = [f"saves {escape(k)}" for k in shown]
    for col in ("fix", "change", "P95 after", "saves", *class_cols, "evidence"):
        right = col in ("P95 after", "saves") or col in class_cols
        ranked.add_column(col, justify="right" if right else "left", overflow="fold")
    for c in cands:
        kind = c["kind"] + ("" if c.get("established", True) else " (assumed)")
        per = c.get("classes") or {}
        cells = [format_ms(per[k]["p95_saving_ms"]) if k in per else "—" for k in shown]
        ranked.add_row(kind, escape(c["change"]), format_ms(c["p95_after_ms"]), format_ms(c["p95_saving_ms"]),
                       *cells, escape(c["evidence"]))  # fmt: skip
    con.print(ranked)
    if len(by_class) > len(shown):
        con.print(f"[dim]P95 saving shown for the {len(shown)} largest of {len(by_class)} classes (--json: all)[/dim]")
    if doc.get("greedy"):
        steps = [format_ms(doc["p95_before_ms"])] + [format_ms(g["p95_after_ms"]) for g in doc["greedy"]]
        con.print("in order (each given the ones before): " + " → ".join(steps))
        for g in doc["greedy"]:
            per = g.get("classes") or {}
            extra = ", ".join(f"{escape(k)} {format_ms(per[k]['p95_after_ms'])}" for k in shown if k in per)
            con.print(f"  {g['step']}. {escape(g['change'])}  P95 {format_ms(g['p95_after_ms'])}"
                      + (f" ({extra})" if extra else ""))  # fmt: skip


def print_cacheability(con: Console, doc: dict[str, Any], *, limit: int = 15) -> None:
    """Operations by cacheability score (the three parts), candidates marked with their what-if."""
    table = Table(show_edge=False, header_style="bold", title="cacheability (reuse 40 + cost 30 + immutability 30)")
    for col in ("operation", "calls", "mean", "reuse", "cost", "immut.", "score", "what-if (P95)"):
        table.add_column(col, justify="left" if col in ("operation", "what-if (P95)") else "right")
    for r in doc["operations"][:limit]:
        w = r.get("whatif")
        table.add_row(
            ("[bold]" if r["candidate"] else "") + escape(r["operation"]),
            str(r["calls"]),
            format_ms(r["mean_ms"]),
            f"{r['reuse']:.0f} ({r['reuse_share']:.0%})",
            f"{r['cost']:.0f}",
            f"{r['immutability']:.0f}",
            f"{r['score']:.0f}" + (" ●" if r["candidate"] else ""),
            f"{format_ms(w['p95_before_ms'])} → {format_ms(w['p95_after_ms'])}" if w else "",
        )
    con.print(table)
    for r in doc["operations"]:
        if r.get("whatif"):
            con.print(f"candidate {escape(r['operation'])}: {escape(r['whatif']['change'])}")
    missing = sum(1 for r in doc["operations"] if r["ttl_s"] is None)
    if missing:
        con.print(f"note: {missing} operation(s) without --ttl or --change-rate score 0 on immutability")
