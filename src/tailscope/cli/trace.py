"""``tailscope trace``: ingest and collect traces, show one, analyze a set, diff two sets, project changes (whatif),
score cacheability, list and delete sets, write demo traces (parse, call :mod:`tailscope.api.trace`
and :mod:`tailscope.api.demo`, render)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import TRACE_CACHEABILITY, TRACE_COLLECT, TRACE_INGEST, TRACE_PATH, TRACE_WHATIF
from tailscope.cli import common as opt
from tailscope.cli.common import (
    command_app,
    emit_json,
    json_or_render,
    json_path_option,
    with_flags,
    write_text,
    wrote,
)

trace_app = command_app(
    help=(
        "Latency is a tree: critical paths, layer attribution, waterfalls and before/after diffs of real traces.\n\n"
        "Example: tailscope trace demo --out demo-traces/ && "
        "tailscope trace ingest demo-traces/before.otlp.json --set before && tailscope trace analyze --set before"
    ),
    no_args_is_help=True,
)


@trace_app.command("ingest")
@with_flags(TRACE_INGEST.values())
def ingest(
    files: list[Path] = typer.Argument(..., help="Trace files: OTLP JSON/protobuf, Jaeger JSON, Zipkin v2 JSON."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """Load trace files into a set. Example: tailscope trace ingest traces/*.json --set before"""
    from tailscope.api.trace import ingest_traces
    from tailscope.report.trace_lines import ingest_lines
    from tailscope.store.spans import SpanStore

    done = ingest_traces(files, store=SpanStore(db), **options)
    warnings, line = ingest_lines(done.report, done.files, options["set_name"], done.set.spans, done.set.traces)
    for warning in warnings:
        typer.echo(warning, err=True)
    typer.echo(line)


@trace_app.command("collect")
@with_flags(TRACE_COLLECT.values())
def collect(db: opt.Db = None, **options: Any) -> None:
    """Receive OTLP/HTTP traces (JSON and protobuf), and OTLP/gRPC with --grpc-port.
    Example: tailscope trace collect --port 4318 --grpc-port 4317 --set live"""
    from tailscope.api.trace import collect_traces
    from tailscope.report.trace_lines import collect_line
    from tailscope.store.spans import SpanStore

    name = options["set_name"]
    got = collect_traces(**options, store=SpanStore(db), handle_signals=True,
                         on_listening=lambda url: print(f"listening on {url} → set {name!r}", flush=True))  # fmt: skip
    typer.echo(collect_line(got))


@trace_app.command("join")
def join(
    run: str = typer.Option(..., "--run", help="Bench run (id, prefix or latest) made with --trace-context."),
    set_name: str = typer.Option(..., "--set", help="Trace set holding the server's spans (trace collect --set)."),
    json_out: Path | None = json_path_option("the join (parts per request, distributions)"),
    skew_tolerance_ms: float = typer.Option(
        1.0, "--skew-tolerance-ms", help="Suspect clock skew when spans lie this far outside the client's view."
    ),
    trace_db: Path | None = typer.Option(None, "--trace-db", help="Store holding the set, if not --db."),
    db: opt.Db = None,
) -> None:
    """Join a bench run with a trace set by trace id; take each client-seen TTFT and E2E apart.
    Example: tailscope trace join --run latest --set live"""
    from tailscope.api.join import join_traces
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_join

    result = join_traces(run, set_name, skew_tolerance_ms=skew_tolerance_ms, store=db, trace_store=trace_db)
    doc = result.to_dict()
    json_or_render(doc, json_out, lambda: print_join(stdout_console(), doc))


@trace_app.command("show")
@with_flags(TRACE_PATH.values())
def show(
    trace_id: str = typer.Argument(..., help="Trace id or a unique prefix."),
    set_name: str | None = typer.Option(None, "--set", help="Trace set (default: search all sets)."),
    json_out: Path | None = json_path_option("{trace_id, spans, critical_path, exclusive_ns}"),
    db: opt.Db = None,
    **path: Any,
) -> None:
    """Show one trace's tree with the critical path. Example: tailscope trace show 4bf92f35 --set before"""
    from tailscope.api.trace import show_trace
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_trace

    view = show_trace(trace_id, set_name=set_name, **path, store=db)
    json_or_render(
        view.to_dict(), json_out, lambda: print_trace(stdout_console(), view.tree, view.critical_path, view.layers)
    )


@trace_app.command("analyze")
@with_flags(TRACE_PATH.values())
def analyze(
    set_name: str = typer.Option(..., "--set", help="Trace set to analyze (or a trace file: nothing is stored)."),
    root_op: str | None = typer.Option(None, "--root-op", help='Only traces whose root is this, e.g. "POST /chat".'),
    json_path: Path | None = json_path_option("the full analysis"),
    db: opt.Db = None,
    **path: Any,
) -> None:
    """Where the time of slow traces goes. Example: tailscope trace analyze --set before --root-op "POST /chat\""""
    from tailscope.api.trace import analyze_traces
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_analysis

    result = analyze_traces(set_name, root_op=root_op, **path, store=db)
    doc = result.to_dict()
    json_or_render(doc, json_path, lambda: print_analysis(stdout_console(), doc))


@trace_app.command("diff")
@with_flags(TRACE_PATH.values())
def diff(
    before: str = typer.Option(..., "--before", help="Trace set before the change."),
    after: str = typer.Option(..., "--after", help="Trace set after the change."),
    json_path: Path | None = json_path_option("the diff"),
    db: opt.Db = None,
    **path: Any,
) -> None:
    """Why latency moved between two sets. Example: tailscope trace diff --before before --after after"""
    from tailscope.api.trace import diff_traces
    from tailscope.errors import NotFoundError
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_diff

    result = diff_traces(before, after, **path, store=db)
    doc = result.to_dict()
    if not result.root_ops:
        emit_json(doc, json_path)
        raise NotFoundError(f"sets {before!r} and {after!r} share no root operation; nothing to compare")
    json_or_render(doc, json_path, lambda: print_diff(stdout_console(), doc))


@trace_app.command("whatif")
@with_flags(TRACE_WHATIF.values())
def whatif(
    set_name: str = typer.Option(..., "--set", help="Trace set to re-time (or a trace file: nothing is stored)."),
    json_path: Path | None = json_path_option("{before, after, changes, traces, …}"),
    html_path: Path | None = typer.Option(None, "--html", help="Also write the before/after view as HTML here."),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """Project changes before making them: every trace re-timed along its tree, P50/P95/P99 before and after
    (all changes apply together).

    Example: tailscope trace whatif --set before --set-duration "auth=30ms" --parallel "search_a,search_b" --rank
    """
    from tailscope.api.whatif import whatif as project_whatif
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_whatif

    options["class_attribute"] = options["class_attribute"] or None
    result = project_whatif(set_name, **options, store=db)
    doc = result.to_dict()
    if html_path is not None:
        from tailscope.report.html_whatif import render_whatif_page

        write_text(html_path, render_whatif_page(doc), "--html")
        wrote(html_path)
    json_or_render(doc, json_path, lambda: print_whatif(stdout_console(), doc))


@trace_app.command("cacheability")
@with_flags(TRACE_CACHEABILITY.values())
def cacheability(
    set_name: str = typer.Option(..., "--set", help="Trace set to score (or a trace file: nothing is stored)."),
    json_path: Path | None = json_path_option("{operations, candidates}"),
    db: opt.Db = None,
    **options: Any,
) -> None:
    """Score operations for caching (reuse 40, compute cost 30, immutability 30; ≥ 60 = candidate, with its what-if).

    Example: tailscope trace cacheability --set before --ttl "qdrant search=7d" --change-rate "get_user=24/d"
    """
    from tailscope.api.cacheability import cacheability as score_cacheability
    from tailscope.report.console import stdout_console
    from tailscope.report.trace_console import print_cacheability

    doc = score_cacheability(set_name, **options, store=db).to_dict()
    json_or_render(doc, json_path, lambda: print_cacheability(stdout_console(), doc))


@trace_app.command("demo")
def demo(
    out: Path = typer.Option(Path("demo-traces"), "--out", help="Folder for the generated files."),
    traces: int = typer.Option(2000, "--traces", help="Traces per file."),
    seed: int = typer.Option(7, "--seed", help="Random seed (same seed, same traces)."),
) -> None:
    """Write synthetic agent traces with known waterfalls. Example: tailscope trace demo --out demo-traces/"""
    from tailscope.api.demo import write_demo_traces
    from tailscope.report.trace_lines import demo_lines

    for line in demo_lines(write_demo_traces(out, traces=traces, seed=seed), out, traces):
        typer.echo(line)


@trace_app.command("sets")
def sets(db: opt.Db = None) -> None:
    """List the trace sets in the store with their span and trace counts. Example: tailscope trace sets"""
    from tailscope.api.trace import trace_sets
    from tailscope.report.trace_lines import sets_lines

    found = trace_sets(store=db)
    if not found:
        typer.echo("no trace sets yet — run `tailscope trace ingest FILES --set NAME`")
        return
    for line in sets_lines(found):
        typer.echo(line)


@trace_app.command("delete")
def delete(
    set_names: list[str] = typer.Argument(..., help="Names of the trace sets to delete."),
    db: opt.Db = None,
) -> None:
    """Delete trace sets and their spans. Example: tailscope trace delete before"""
    from tailscope.api.trace import delete_trace_sets
    from tailscope.report.trace_lines import delete_line

    typer.echo(delete_line(delete_trace_sets(set_names, store=db)))
