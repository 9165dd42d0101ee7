"""``tailscope trace``: ingest and collect traces, show one, analyze a set, diff two sets, list and delete sets,
write demo traces."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from tailscope.cli.common import command_app

trace_app = command_app(
    help=(
        "Latency is a tree: critical paths, layer attribution, waterfalls and before/after diffs of real traces.\n\n"
        "Example: tailscope trace demo --out demo-traces/ && "
        "tailscope trace ingest demo-traces/before.otlp.json --set before && tailscope trace analyze --set before"
    ),
    no_args_is_help=True,
)

_DB = typer.Option(None, "--db", help="Store path (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb).")
_POLICY = typer.Option("default", "--policy", help="Critical-path policy: default or jaeger (Jaeger UI's sections).")
_ASYNC = typer.Option(
    False, "--async-blocking", help="Treat follows-from and CONSUMER children as blocking their parent."
)


def _rules(path: Path | None) -> tuple[Any, ...]:
    if path is None:
        return ()
    import yaml

    from tailscope.errors import ConfigError
    from tailscope.trace.layers import parse_layer_rules

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--rules {path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--rules {path}: invalid YAML ({exc})") from None
    return parse_layer_rules(data, source=str(path))


def _check_policy(policy: str) -> None:
    from tailscope.errors import ConfigError
    from tailscope.trace.critical_path import POLICIES

    if policy not in POLICIES:
        raise ConfigError(f"--policy {policy!r}: use one of {', '.join(POLICIES)}")


@trace_app.command("ingest")
def ingest(
    files: list[Path] = typer.Argument(..., help="Trace files: OTLP JSON/protobuf, Jaeger JSON, Zipkin v2 JSON."),
    set_name: str = typer.Option(..., "--set", help="Name of the trace set to add the spans to."),
    fmt: str = typer.Option("auto", "--format", help="auto, otlp-json, otlp-proto, jaeger or zipkin."),
    rules: Path | None = typer.Option(None, "--rules", help="YAML layer rules (regex on service/name/attributes)."),
    replace: bool = typer.Option(False, "--replace", help="Empty the set first."),
    db: Path | None = _DB,
) -> None:
    """Load trace files into a set. Example: tailscope trace ingest traces/*.json --set before"""
    from tailscope.errors import TraceFormatError
    from tailscope.store.spans import SpanStore
    from tailscope.trace.ingest.files import FORMATS
    from tailscope.trace.ingest.sets import ingest_paths

    if fmt not in FORMATS:
        raise TraceFormatError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    store = SpanStore(db)
    if replace:
        store.delete_set(set_name)
    report = ingest_paths(store, set_name, [str(f) for f in files], fmt=fmt, rules=_rules(rules))
    for problem in report.problems[:20]:
        print(f"warning: {problem}", file=sys.stderr)
    if report.problem_count > 20:
        print(f"warning: … and {report.problem_count - 20} more problems", file=sys.stderr)
    info = store.get_set(set_name)
    typer.echo(
        f"loaded {report.spans} spans from {len(files)} file(s) into set {set_name!r} "
        f"({info.spans} spans, {info.traces} traces in the set)"
        + (f"; {report.problem_count} problem(s) reported" if report.problem_count else "")
    )


@trace_app.command("collect")
def collect(
    port: int = typer.Option(4318, "--port", help="TCP port (0 picks a free one)."),
    set_name: str = typer.Option("live", "--set", help="Trace set the received spans go to."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (keep 127.0.0.1 unless you mean it)."),
    token: str | None = typer.Option(None, "--token", help="Require 'Authorization: Bearer TOKEN'."),
    max_body_mb: float = typer.Option(16.0, "--max-body-mb", help="Largest accepted request body (MiB)."),
    duration: float = typer.Option(0.0, "--duration", help="Stop after this many seconds (0 = until Ctrl-C)."),
    rules: Path | None = typer.Option(None, "--rules", help="YAML layer rules."),
    db: Path | None = _DB,
) -> None:
    """Receive OTLP/HTTP traces (JSON and protobuf). Example: tailscope trace collect --port 4318 --set live"""
    import asyncio
    import signal

    from tailscope.store.spans import SpanStore
    from tailscope.trace.receiver import OtlpReceiver

    store = SpanStore(db)
    store.ensure_schema()
    receiver = OtlpReceiver(
        lambda spans: store.write(set_name, spans, source="otlp/http"),
        host=host,
        port=port,
        token=token,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        rules=_rules(rules),
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await receiver.start()
        print(f"listening on http://{host}:{receiver.port}/v1/traces → set {set_name!r}", flush=True)
        try:
            if duration > 0:
                await asyncio.wait_for(stop.wait(), timeout=duration)
            else:
                await stop.wait()
        except TimeoutError:
            pass
        finally:
            await receiver.stop()

    asyncio.run(main())
    typer.echo(
        f"received {receiver.received} spans in {receiver.requests} request(s)"
        + (f", rejected {receiver.rejected}" if receiver.rejected else "")
    )


@trace_app.command("show")
def show(
    trace_id: str = typer.Argument(..., help="Trace id or a unique prefix."),
    set_name: str | None = typer.Option(None, "--set", help="Trace set (default: search all sets)."),
    json_out: bool = typer.Option(False, "--json", help="Print {trace_id, spans, critical_path, exclusive_ns}."),
    policy: str = _POLICY,
    async_blocking: bool = _ASYNC,
    db: Path | None = _DB,
) -> None:
    """Show one trace's tree with the critical path. Example: tailscope trace show 4bf92f35 --set before"""
    from tailscope.store.spans import SpanStore
    from tailscope.trace.critical_path import critical_path
    from tailscope.trace.facts import span_layers
    from tailscope.trace.tree import build_tree

    _check_policy(policy)
    _, spans = SpanStore(db).load_trace(set_name, trace_id)
    tree = build_tree(spans)
    cp = critical_path(tree, policy=policy, async_blocking=async_blocking)
    layers = span_layers(tree)
    if json_out:
        doc = {
            "trace_id": tree.trace_id,
            "spans": [
                {
                    "span_id": s.span_id,
                    "parent_id": s.parent_id,
                    "name": s.name,
                    "start_ns": s.start_ns,
                    "end_ns": s.end_ns,
                    "layer": layers[i],
                }
                for i, s in enumerate(tree.spans)
            ],
            "critical_path": [
                {"span_id": g.span_id, "name": g.name, "start_ns": g.start_ns, "end_ns": g.end_ns} for g in cp.segments
            ],
            "exclusive_ns": cp.exclusive_ns,
        }
        print(json.dumps(doc, indent=2))
        return
    _render_tree(tree, cp, layers)


def _render_tree(tree: Any, cp: Any, layers: list[str]) -> None:
    from rich.table import Table

    from tailscope.units import format_ms

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
    con = _stdout()
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


@trace_app.command("analyze")
def analyze(
    set_name: str = typer.Option(..., "--set", help="Trace set to analyze."),
    root_op: str | None = typer.Option(None, "--root-op", help='Only traces whose root is this, e.g. "POST /chat".'),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the full analysis as JSON here."),
    policy: str = _POLICY,
    async_blocking: bool = _ASYNC,
    db: Path | None = _DB,
) -> None:
    """Where the time of slow traces goes. Example: tailscope trace analyze --set before --root-op "POST /chat\""""
    from tailscope.store.spans import SpanStore
    from tailscope.trace.analysis import analyze_facts
    from tailscope.trace.ingest.sets import set_facts

    _check_policy(policy)
    facts = set_facts(SpanStore(db), set_name, policy=policy, async_blocking=async_blocking)
    result = analyze_facts(facts, root_op=root_op)
    result["set"] = set_name
    result["policy"] = policy
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    _render_analysis(result)
    if json_path is not None:
        print(f"wrote {json_path}", file=sys.stderr)


def _render_analysis(r: dict[str, Any]) -> None:
    from rich.table import Table

    from tailscope.units import format_ms

    con = _stdout()
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


@trace_app.command("diff")
def diff(
    before: str = typer.Option(..., "--before", help="Trace set before the change."),
    after: str = typer.Option(..., "--after", help="Trace set after the change."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the diff as JSON here."),
    policy: str = _POLICY,
    async_blocking: bool = _ASYNC,
    db: Path | None = _DB,
) -> None:
    """Why latency moved between two sets. Example: tailscope trace diff --before before --after after"""
    from rich.markup import escape

    from tailscope.errors import NotFoundError
    from tailscope.store.spans import SpanStore
    from tailscope.trace.diff import diff_sets
    from tailscope.trace.ingest.sets import set_facts
    from tailscope.units import format_ms

    _check_policy(policy)
    store = SpanStore(db)
    fb = set_facts(store, before, policy=policy, async_blocking=async_blocking)
    fa = set_facts(store, after, policy=policy, async_blocking=async_blocking)
    result = diff_sets(fb, fa)
    result.update({"before_set": before, "after_set": after, "policy": policy})
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if not result["root_ops"]:
        raise NotFoundError(f"sets {before!r} and {after!r} share no root operation; nothing to compare")
    con = _stdout()
    for op, d in result["root_ops"].items():
        b, a = d["before"], d["after"]
        con.print(
            f"[bold]{op}[/bold]: p50 {format_ms(b['p50'])} → {format_ms(a['p50'])}, "
            f"p99 {format_ms(b['p99'])} → {format_ms(a['p99'])} ({d['delta_p99_ms']:+.1f} ms); "
            f"tail = traces ≥ {d['tail']}"
        )
        for k, e in enumerate(d["explanations"][:8], 1):
            via = f" (branch {e['branch']})" if e["branch"] != e["op"] else ""
            con.print(escape(f"  {k}. [{e['kind']}] {e['detail']}{via}"))
    for name in ("only_before", "only_after"):
        if result[name]:
            con.print(f"{name.replace('_', ' ')}: {', '.join(result[name])}")
    if json_path is not None:
        print(f"wrote {json_path}", file=sys.stderr)


@trace_app.command("demo")
def demo(
    out: Path = typer.Option(Path("demo-traces"), "--out", help="Folder for the generated files."),
    traces: int = typer.Option(2000, "--traces", help="Traces per file."),
    seed: int = typer.Option(7, "--seed", help="Random seed (same seed, same traces)."),
) -> None:
    """Write synthetic agent traces with known waterfalls. Example: tailscope trace demo --out demo-traces/"""
    from tailscope.errors import ConfigError
    from tailscope.trace.demo import demo_traces, to_otlp_json

    if traces < 1:
        raise ConfigError(f"--traces must be ≥ 1 (got {traces})")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create ({exc.strerror})") from None
    variants = {
        # before: tools run one after another in 63 % of traces
        "before": {"sequential_share": 0.63},
        # after: tools parallelised, but the knowledge-base backend got slower
        "after": {"sequential_share": 0.05, "tool_scale": 1.6},
    }
    for name, kwargs in variants.items():
        path = out / f"{name}.otlp.json"
        with open(path, "w", encoding="utf-8") as fh:
            batch: list[Any] = []
            for spans in demo_traces(traces, seed=seed + (name == "after"), **kwargs):  # type: ignore[arg-type]
                batch.extend(spans)
                if len(batch) >= 2000:
                    fh.write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
                    batch = []
            if batch:
                fh.write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
        typer.echo(f"wrote {path} ({traces} traces, OTLP JSON lines)")
    typer.echo(
        f"next: tailscope trace ingest {out}/before.otlp.json --set before && "
        f"tailscope trace ingest {out}/after.otlp.json --set after && tailscope trace analyze --set before && "
        "tailscope trace diff --before before --after after"
    )


@trace_app.command("sets")
def sets(db: Path | None = _DB) -> None:
    """List the trace sets in the store with their span and trace counts. Example: tailscope trace sets"""
    from tailscope.store.spans import SpanStore

    found = SpanStore(db).list_sets()
    if not found:
        typer.echo("no trace sets yet — run `tailscope trace ingest FILES --set NAME`")
        return
    width = max(3, *(len(s.name) for s in found))
    typer.echo(f"{'set':<{width}}  {'spans':>12}  {'traces':>10}  updated               source")
    for s in found:
        typer.echo(f"{s.name:<{width}}  {s.spans:>12,}  {s.traces:>10,}  {s.updated_at[:19]:<20}  {s.source}")


@trace_app.command("delete")
def delete(
    set_names: list[str] = typer.Argument(..., help="Names of the trace sets to delete."),
    db: Path | None = _DB,
) -> None:
    """Delete trace sets and their spans. Example: tailscope trace delete before"""
    from tailscope.store.spans import SpanStore

    store = SpanStore(db)
    gone = [store.get_set(name) for name in set_names]  # every name must exist before anything is deleted
    for s in gone:
        store.delete_set(s.name)
    typer.echo("deleted " + ", ".join(f"{s.name!r} ({s.spans:,} spans, {s.traces:,} traces)" for s in gone))


def _stdout() -> Any:
    from tailscope.report.console import stdout_console

    return stdout_console()
