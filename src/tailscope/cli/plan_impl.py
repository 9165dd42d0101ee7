"""The work behind ``tailscope plan`` (imported lazily): resolve inputs, call plan/, render tables and JSON."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import get_model_entry
from tailscope.engine.perf import StepTimeModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Parallelism
from tailscope.engine.twin import TwinStepModel
from tailscope.errors import ConfigError, PlanError
from tailscope.io.calibration import load_calibration
from tailscope.io.models import resolve_model
from tailscope.metrics.slo import parse_slo
from tailscope.plan.budget import BudgetPlan, budget_from_shares, plan_budget
from tailscope.plan.capacity import CapacityPlan, SimCheck, search_capacity
from tailscope.plan.estimate import estimate_request
from tailscope.plan.kv import plan_kv
from tailscope.plan.napkin import napkin_capacity, plan_cost
from tailscope.report.console import stdout_console
from tailscope.units import parse_duration_s

GB = 1e9


def _emit(doc: dict[str, Any], json_out: Path | None, render: Any) -> None:
    """Print the table (or only JSON with ``--json -``) and write JSON when asked."""
    text = json.dumps(doc, indent=1, default=str)
    if json_out is not None and str(json_out) == "-":
        print(text)
        return
    render(stdout_console())
    if json_out is not None:
        try:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--json {json_out}: cannot write it ({exc.strerror})") from None


def _kv_table(title: str, rows: list[tuple[str, str]], assumptions: tuple[str, ...] | list[str]) -> Any:
    def render(con: Console) -> None:
        t = Table(title=title, title_justify="left", show_header=False, show_edge=False, box=None)
        t.add_column(style="bold")
        t.add_column(justify="right")
        for k, v in rows:
            t.add_row(k, v)
        con.print(t)
        if assumptions:
            con.print("[dim]assumptions:[/]")
            for a in assumptions:
                con.print(f"[dim]  · {a}[/]")

    return render


def _max_context(model_ref: str) -> int | None:
    try:
        cfg = get_model_entry(model_ref).config
    except Exception:
        return None
    value = cfg.get("max_position_embeddings")
    return int(value) if value else None


def _perf(
    model_ref: str,
    gpu_ref: str,
    tp: int,
    weights_dtype: str | None,
    kv_dtype: str,
    calibration: Path | None,
    backend: str = "vllm",
    ep: int = 1,
) -> StepTimeModel | TrainedStepModel | TwinStepModel:
    cal = load_calibration(calibration)
    if cal.twin is not None:
        if tp != 1:
            raise PlanError("a digital twin describes one deployment as it was measured: plan it with --tp 1")
        return TwinStepModel(cal.twin)  # the twin's fitted costs and KV capacity replace the catalogs
    model = resolve_model(model_ref)
    gpu = resolve_gpu(gpu_ref)
    if cal.has_overrides:  # roofline efficiencies given: the plain roofline with them
        eff = cal.efficiency(gpu.id, model_ref)
        return StepTimeModel(model, gpu, tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, efficiency=eff)
    par = Parallelism(tp, 1, ep if model.is_moe else 1)
    return TrainedStepModel(model, gpu, par, engine=backend, weights_dtype=weights_dtype, kv_dtype=kv_dtype)


def cmd_kv(
    model_ref: str,
    context: int,
    kv_dtype: str,
    weights_dtype: str | None,
    gpu_ref: str | None,
    tp: int,
    util: float,
    json_out: Path | None,
) -> None:
    model = resolve_model(model_ref)
    gpu = resolve_gpu(gpu_ref) if gpu_ref else None
    p = plan_kv(
        model,
        context=context,
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        gpu=gpu,
        tp=tp,
        gpu_memory_utilization=util,
        max_context=_max_context(model_ref),
    )
    rows = [
        ("KV bytes per token", f"{p.bytes_per_token:,} B ({p.bytes_per_token / 1024:,.1f} KiB)"),
        (f"KV per sequence at {context:,} tokens", f"{p.per_sequence_bytes / GB:,.3f} GB"),
        (
            f"weights ({p.weights_dtype})",
            f"{p.weights_bytes / GB:,.1f} GB total, {p.weights_per_gpu_bytes / GB:,.1f} GB/GPU",
        ),
    ]
    if p.kv_capacity_tokens is not None:
        rows.append((f"KV capacity on {tp} × {p.gpu}", f"{p.kv_capacity_tokens:,} tokens"))
        rows.append((f"max concurrent sequences of {context:,}", f"{p.max_sequences:,}"))
    _emit(p.to_dict(), json_out, _kv_table(f"{model.name}: KV cache and memory", rows, p.assumptions))


def cmd_estimate(
    model_ref: str,
    gpu_ref: str,
    input_tokens: int,
    output_tokens: int,
    concurrency: int,
    tp: int,
    weights_dtype: str | None,
    kv_dtype: str,
    calibration: Path | None,
    json_out: Path | None,
) -> None:
    perf = _perf(model_ref, gpu_ref, tp, weights_dtype, kv_dtype, calibration)
    e = estimate_request(perf, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency)
    rows = [
        ("prefill", f"{e.prefill_ms:,.1f} ms ({e.prefill_bound}-bound)"),
        ("TTFT (with front end)", f"{e.ttft_ms:,.1f} ms"),
        ("TPOT", f"{e.tpot_ms:,.2f} ms ({e.decode_bound}-bound decode, step {e.decode_step_ms:.2f} ms)"),
        ("E2E", f"{e.e2e_ms:,.0f} ms"),
        ("replica throughput", f"{e.output_tokens_per_s:,.0f} output tok/s, {e.requests_per_s:,.2f} req/s"),
    ]
    title = f"{model_ref} on {tp} × {gpu_ref}: {input_tokens} in / {output_tokens} out at concurrency {concurrency}"
    assumptions = (*e.assumptions, f"calibration: {calibration or 'catalog defaults'}")
    _emit(e.to_dict(), json_out, _kv_table(title, rows, assumptions))


@dataclass(frozen=True, slots=True)
class CapacityArgs:
    model: str | None
    gpu: str | None
    profile: Path | None
    input_tokens: str
    output_tokens: str
    target_rps: float | None
    slo: tuple[str, ...]
    headroom: float
    tp: str
    max_replicas: int
    gpu_price: float | None
    weights_dtype: str | None
    kv_dtype: str
    calibration: Path | None
    sim_requests: int
    users: int | None
    tokens_per_user_s: float | None
    gpu_tokens_s: float | None
    backend: str = "vllm"


def _mean_lengths(a: CapacityArgs) -> tuple[int, int]:
    from tailscope.workload.lengths import parse_length_spec

    if a.profile is None:
        return (
            round(parse_length_spec(a.input_tokens, what="--input-tokens").mean()),
            round(parse_length_spec(a.output_tokens, what="--output-tokens").mean()),
        )
    from tailscope.io.profile import load_profile

    p = load_profile(a.profile)
    total = sum(c.weight for c in p.classes)
    mean_in = sum(c.weight * c.input_tokens.mean() for c in p.classes) / total
    mean_out = sum(c.weight * c.output_tokens.mean() for c in p.classes) / total
    return max(1, round(mean_in)), max(1, round(mean_out))


def cmd_capacity(a: CapacityArgs, json_out: Path | None) -> None:
    if a.users is not None or a.tokens_per_user_s is not None or a.gpu_tokens_s is not None:
        if a.users is None or a.tokens_per_user_s is None or a.gpu_tokens_s is None:
            raise ConfigError("the napkin form needs --users, --tokens-per-user-s and --gpu-tokens-s together")
        n = napkin_capacity(a.users, a.tokens_per_user_s, a.gpu_tokens_s, a.headroom)
        rows = [(f"step {i + 1}", s) for i, s in enumerate(n.steps())] + [("GPUs", f"{n.gpus}")]
        _emit(n.to_dict(), json_out, _kv_table("Capacity (napkin)", rows, ["every GPU sustains --gpu-tokens-s"]))
        return
    if a.model is None or a.gpu is None or a.target_rps is None:
        raise ConfigError("plan capacity needs --model, --gpu and --target-rps (or the napkin form: --users …)")
    try:
        tps = tuple(int(x) for x in a.tp.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--tp {a.tp!r}: expected degrees like 1,2,4") from None
    if not tps or any(t < 1 for t in tps):
        raise ConfigError(f"--tp {a.tp!r}: expected degrees ≥ 1 like 1,2,4")
    slos = tuple(parse_slo(s) for s in a.slo)
    mean_in, mean_out = _mean_lengths(a)
    load = a.target_rps * (1 + a.headroom)
    model_ref, gpu_ref = a.model, a.gpu
    # with a twin the fitted costs and KV facts replace the catalogs; the simulator still wants catalog ids
    sim_model, sim_gpu = (model_ref, gpu_ref)
    if load_calibration(a.calibration).twin is not None:
        sim_model, sim_gpu = "llama-3.1-8b", "h100-sxm"

    def perf_for_tp(tp: int) -> StepTimeModel | TrainedStepModel | TwinStepModel:
        # an MoE model spreads its experts over the replica's GPUs (expert parallelism = TP degree)
        return _perf(model_ref, gpu_ref, tp, a.weights_dtype, a.kv_dtype, a.calibration, a.backend, tp)

    def simulate(tp: int, replicas: int) -> SimCheck:
        from tailscope.sim.run import SimArgs, run_sim

        args = SimArgs(
            model=sim_model,
            gpu=sim_gpu,
            tp=tp,
            replicas=replicas,
            backend=a.backend,
            ep=tp if resolve_model(model_ref).is_moe and sim_model == model_ref else 1,
            weights_dtype=a.weights_dtype,
            kv_dtype=a.kv_dtype,
            calibration=a.calibration,
            profile=a.profile,
            rate=load,
            arrival="poisson",
            requests=a.sim_requests,
            input_tokens=a.input_tokens,
            output_tokens=a.output_tokens,
            slo=a.slo,
            store=False,
            explicit=frozenset({"rate", "requests", "arrival"}),
        )
        out = run_sim(args)
        checks = out.summary.get("slo") or []
        failed = (out.summary.get("requests") or {}).get("failed", 0)
        return SimCheck(
            passed=bool(checks) and all(c["passed"] for c in checks) and failed == 0,
            observed={c["slo"]: c["observed_ms"] for c in checks},
            requests=(out.summary.get("requests") or {}).get("total", 0),
            goodput_rps=out.summary.get("goodput_rps"),
        )

    t0 = time.perf_counter()
    plan = search_capacity(
        perf_for_tp,
        simulate,
        tp_options=tps,
        target_rps=a.target_rps,
        slos=slos,
        input_tokens=mean_in,
        output_tokens=mean_out,
        headroom=a.headroom,
        gpu_price_per_hour=a.gpu_price,
        max_replicas=a.max_replicas,
    )
    elapsed = time.perf_counter() - t0
    doc = plan.to_dict()
    doc["search_seconds"] = elapsed
    doc["model"], doc["gpu"] = model_ref, gpu_ref
    _emit(doc, json_out, _capacity_render(plan, model_ref, gpu_ref, elapsed))


def _capacity_render(plan: CapacityPlan, model: str, gpu: str, elapsed: float) -> Any:
    def render(con: Console) -> None:
        t = Table(
            title=f"{model} on {gpu}: capacity for {plan.target_rps:g} req/s (+{plan.headroom:.0%} headroom)",
            title_justify="left",
            show_edge=False,
            header_style="bold",
        )
        for c in ("", "TP", "replicas", "GPUs", "$/h", "analytic", "sims", "observed at the answer"):
            t.add_column(c)
        for i, o in enumerate(plan.options):
            mark = "★" if plan.best is not None and o is plan.best else ""
            observed = ""
            if o.check is not None:
                observed = ", ".join(
                    f"{k} {v:,.0f} ms" if v is not None else f"{k} —" for k, v in o.check.observed.items()
                )
            t.add_row(
                mark,
                str(o.tp),
                "—" if o.replicas is None else str(o.replicas),
                "—" if o.gpus is None else str(o.gpus),
                "—" if o.usd_per_hour is None else f"{o.usd_per_hour:,.2f}",
                "—" if o.analytic_replicas is None else str(o.analytic_replicas),
                str(o.sims),
                observed or o.note,
            )
            del i
        con.print(t)
        if plan.best is None:
            con.print("[red]no configuration meets the SLO within the limits[/]")
        else:
            b = plan.best
            con.print(
                f"[green]answer: {b.replicas} replica(s) × TP{b.tp} = {b.gpus} GPUs[/] — re-checked by simulation "
                f"({b.check.requests if b.check else 0} requests; search took {elapsed:.1f} s)"
            )
        for s in plan.assumptions:
            con.print(f"[dim]  · {s}[/]")

    return render


def cmd_cost(
    gpu_price: float,
    run_ref: str | None,
    gpus: int | None,
    api_in: float | None,
    api_out: float | None,
    daily: int | None,
    db: Path | None,
    json_out: Path | None,
) -> None:
    if run_ref is None:
        raise ConfigError("plan cost needs --run RUN_ID (a stored bench or sim run) to take the throughput from")
    from tailscope.store.runs import RunStore

    stored = RunStore(db).get_run(run_ref)
    s = stored.summary or {}
    engine = stored.run.settings.get("engine") if isinstance(stored.run.settings, dict) else None
    n_gpus = gpus
    if n_gpus is None and isinstance(engine, dict):
        n_gpus = int(engine.get("replicas", 1)) * int(engine.get("tp", 1))
    if n_gpus is None:
        raise ConfigError(f"run {stored.run.id} is a bench run: say how many GPUs served it with --gpus N")
    c = plan_cost(
        gpus=n_gpus,
        gpu_price_per_hour=gpu_price,
        output_tokens_per_s=float(s.get("output_tokens_per_s") or 0.0),
        requests_per_s=float(s.get("requests_per_s") or 0.0),
        mean_input_tokens=float((s.get("input_tokens") or {}).get("mean") or 0.0),
        mean_output_tokens=float((s.get("output_tokens") or {}).get("mean") or 0.0),
        source=f"{stored.run.kind.value} run {stored.run.id}",
        api_price_in=api_in,
        api_price_out=api_out,
        daily_requests=daily,
    )
    rows = [
        ("throughput", f"{c.output_tokens_per_s:,.0f} output tok/s, {c.requests_per_s:,.2f} req/s on {c.gpus} GPUs"),
        ("$ per 1M output tokens", f"{c.usd_per_million_output_tokens:,.4f}"),
        ("$ per request", f"{c.usd_per_request:,.6f}"),
    ]
    if c.api_usd_per_request is not None:
        rows.append(("API $ per request", f"{c.api_usd_per_request:,.6f}"))
        if c.break_even_daily_requests is not None:
            rows.append(("break-even", f"{c.break_even_daily_requests:,.0f} requests/day for {c.gpus} GPUs"))
    if c.daily_requests is not None:
        rows.append(("self-host $/day", f"{c.self_host_usd_per_day:,.2f} ({c.gpus_for_daily} GPUs)"))
        rows.append(("API $/day", f"{c.api_usd_per_day:,.2f}"))
    assumptions = [f"throughput from {c.source}", "GPUs billed every hour and kept busy at that throughput"]
    _emit(c.to_dict(), json_out, _kv_table("Cost", rows, assumptions))


def _layer_arg(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"--layer {text!r}: expected LAYER=DURATION, e.g. gateway=50ms")
    return name.strip(), parse_duration_s(value, what=f"--layer {name}", default_unit="ms") * 1000


def cmd_budget(
    target: str,
    layers: tuple[str, ...],
    buffer: float,
    from_traces: str | None,
    out: Path | None,
    db: Path | None,
    json_out: Path | None,
) -> None:
    target_ms = parse_duration_s(target, what="--target", default_unit="ms") * 1000
    plan: BudgetPlan
    if from_traces is not None:
        shares, measured = _trace_shares(from_traces, db)
        plan = budget_from_shares(target_ms, shares, buffer=buffer, measured_p99_ms=measured)
    else:
        if not layers:
            raise ConfigError("give --layer LAYER=DURATION (repeatable) or --from-traces SET")
        plan = plan_budget(target_ms, [_layer_arg(x) for x in layers], buffer=buffer)
    if out is not None:
        import yaml

        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(yaml.safe_dump(plan.contract(), sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write it ({exc.strerror})") from None
    rows = [(f"{lb.layer}", f"{lb.budget_ms:,.0f} ms ({lb.share:.0%})") for lb in plan.layers]
    rows.insert(0, ("usable after buffer", f"{plan.usable_ms:,.0f} ms of {plan.target_ms:,.0f} ms"))
    findings = list(plan.findings) + ([f"contract written to {out}"] if out else [])

    def render(con: Console) -> None:
        _kv_table("Latency budget", rows, ())(con)
        for f in plan.findings:
            con.print(f"[red]✗ {f}[/]")
        if plan.ok:
            con.print("[green]✓ the budgets hold[/]")
        if out:
            con.print(f"wrote {out}")

    doc = plan.to_dict()
    doc["contract"] = plan.contract()
    del findings
    _emit(doc, json_out, render)


def _trace_shares(set_name: str, db: Path | None) -> tuple[dict[str, float], dict[str, float]]:
    """Per-layer share of critical-path time in the tail bucket (traces ≥ p99), and each layer's measured p99 of
    critical-path time per trace (ms), of a stored trace set."""
    import numpy as np

    from tailscope.store.spans import SpanStore
    from tailscope.trace.analysis import buckets, composition
    from tailscope.trace.facts import trace_facts
    from tailscope.trace.tree import build_tree

    facts = [trace_facts(build_tree(spans)) for spans in SpanStore(db).iter_traces(set_name)]
    if not facts:
        raise PlanError(f"trace set {set_name!r} has no traces")
    tail = buckets(facts)["tail_bucket"]
    shares = {k: v["share"] for k, v in composition(tail, "path_layer").items()}
    layers = {k for f in facts for k in f.path_layer}
    measured = {k: float(np.quantile([f.path_layer.get(k, 0) / 1e6 for f in facts], 0.99)) for k in sorted(layers)}
    return shares, measured
