"""The work behind ``tailscope calibrate`` and ``tailscope twin check`` (imported lazily)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from tailscope.api._support import run_sync as run_async
from tailscope.engine.twin import ServerFacts, TwinModel
from tailscope.errors import ConfigError, TailscopeError
from tailscope.records import RequestRecord
from tailscope.report.console import stdout_console


def _write_yaml(path: Path, doc: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--out {path}: cannot write it ({exc.strerror})") from None


def _render_twin(con: Console, twin: TwinModel, path: Path, extra: dict[str, Any]) -> None:
    t = Table(title=f"digital twin of {twin.facts.url or twin.facts.model}", title_justify="left", show_edge=False)
    t.add_column("coefficient")
    t.add_column("fitted", justify="right")
    t.add_column("± stderr", justify="right")
    c, s = twin.coefficients.to_dict(), twin.stderr.to_dict()
    for k, v in c.items():
        t.add_row(k, f"{v:,.2f} µs", f"{s[k]:,.2f}")
    con.print(t)
    f = twin.facts
    con.print(
        f"server: KV {f.num_blocks:,} blocks × {f.block_size} = {f.kv_capacity_tokens:,} tokens, max_num_seqs "
        f"{f.max_num_seqs}, max_model_len {f.max_model_len}, prefix caching {f.enable_prefix_caching}"
    )
    r = twin.residuals
    con.print(
        f"fit residuals: decode median |err| {r.get('decode_rel_mad', 0):.1%}, "
        f"prefill {r.get('prefill_rel_mad', 0):.1%}"
        f" ({twin.fitted_on.get('decode_observations')} decode, {twin.fitted_on.get('prefill_observations')} prefill"
        f", {twin.fitted_on.get('loaded_ttft_observations')} loaded-TTFT observations)"
    )
    if twin.send_lag is not None:
        q = twin.send_lag.quantiles_ms
        con.print(
            f"client send lag (open loop, added to predicted arrivals): median {q[len(q) // 2]:.2f} ms, "
            f"max {q[-1]:.2f} ms"
        )
    for k, v in extra.items():
        con.print(f"{k}: {v}")
    con.print(f"wrote {path}")


def cmd_calibrate(
    url: str | None,
    model: str | None,
    out: Path,
    from_runs: tuple[str, ...],
    budget: float,
    concurrencies: str,
    burst: bool,
    rounds: int | None,
    prefill_repeats: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int | None,
    num_blocks: int | None,
    seed: int,
    db: Path | None,
) -> None:
    from dataclasses import replace

    from tailscope.engine.twin import send_lag_from
    from tailscope.runner.calibrate import (
        ProbePlan,
        fit_busy_frontend,
        fit_from_runs,
        open_loop_send_lags,
        run_probe,
        server_facts,
    )
    from tailscope.store.runs import RunStore

    err = Console(stderr=True)
    store = RunStore(db)
    records: list[list[RequestRecord]] = []
    extra: dict[str, Any] = {}
    if from_runs:
        runs = [store.get_run(r) for r in from_runs]
        for sr in runs:
            records.append(store.load_records(sr.run.id))
        url = url or runs[0].run.target.url
    if url is None:
        raise ConfigError("give --url (the server to probe, or whose facts to read) or --from-runs RUN")
    facts: ServerFacts
    if block_size is not None and num_blocks is not None:
        facts = ServerFacts(block_size, num_blocks, max_num_seqs, max_num_batched_tokens, url=url, model=model or "")
    else:
        facts = run_async(
            server_facts(
                url,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                block_size=block_size,
                num_blocks=num_blocks,
            )
        )
    if not from_runs:
        try:
            conc = tuple(int(x) for x in concurrencies.split(","))
        except ValueError:
            raise ConfigError(f"--concurrencies {concurrencies!r}: expected numbers like 1,2,4,8") from None
        plan = ProbePlan(concurrencies=conc, burst=burst, time_budget_s=budget)
        for flag, value in (("--rounds", rounds), ("--prefill-repeats", prefill_repeats)):
            if value is not None and not 1 <= value <= 50:
                raise ConfigError(f"{flag} {value}: use 1 to 50")
        if rounds is not None:
            plan = replace(plan, rounds=rounds)
        if prefill_repeats is not None:
            plan = replace(plan, repeats=prefill_repeats)
        results, burst_info, facts = run_async(
            run_probe(
                url,
                model,
                facts,
                plan,
                store=store,
                seed=seed,
                on_phase=lambda name: err.print(f"probe: {name}"),
            )
        )
        for res in results:
            if res.run.settings.get("probe") != "burst":
                records.append(res.records)
        extra["probe runs"] = ", ".join(r.run.id for r in results)
        anchor_tpot = burst_info.pop("anchor_tpot_ms", None)
        anchor_runs = burst_info.pop("anchor_runs", 0)
        anchor_lone = burst_info.pop("anchor_lone_ttft_ms", None)
        if anchor_tpot:
            extra["anchor"] = f"TPOT p50 {anchor_tpot:.2f} ms (mean of {anchor_runs} runs; the reference for --anchor)"
        if anchor_lone:
            extra["anchor, lone requests"] = "TTFT " + ", ".join(
                f"{v:.1f} ms at {k} tokens" for k, v in anchor_lone.items()
            )
        if burst_info:
            extra["burst"] = json.dumps(burst_info)
    twin = fit_from_runs(records, facts, seed=seed)
    # the client's open-loop send lag (the twin adds it to open-loop arrivals, as bench counts it in their latency)
    if from_runs:
        open_runs = [recs for sr, recs in zip(runs, records, strict=True) if sr.run.settings.get("mode") == "open"]
    else:
        open_runs = [r.records for r in results if r.run.settings.get("probe") == "open"]
    twin = replace(twin, send_lag=send_lag_from([v for recs in open_runs for v in open_loop_send_lags(recs)]))
    if not from_runs and open_runs:
        twin = fit_busy_frontend(twin, open_runs[0])
    doc = twin.to_mapping()
    if not from_runs and anchor_tpot:
        doc["fitted_on"]["anchor_tpot_ms"] = anchor_tpot
    if not from_runs and anchor_lone:
        doc["fitted_on"]["anchor_lone_ttft_ms"] = {int(k): float(v) for k, v in anchor_lone.items()}
    if extra.get("burst"):
        doc["fitted_on"]["burst"] = json.loads(extra["burst"])
    doc["fitted_on"]["runs"] = list(from_runs) or extra.get("probe runs", "").split(", ")
    _write_yaml(out, doc)
    _render_twin(stdout_console(), twin, out, extra)


def cmd_twin_check(
    calibration: Path,
    url: str,
    model: str | None,
    profile: Path | None,
    rate: float | None,
    concurrency: int | None,
    arrival: str,
    requests: int | None,
    duration: float | None,
    input_tokens: str,
    output_tokens: str,
    seed: int,
    tolerance: float,
    json_out: Path | None,
    db: Path | None,
    html_out: Path | None = None,
    anchor: bool = False,
    repeat: int = 1,
) -> None:
    import tempfile
    from dataclasses import replace

    from tailscope.client.openai import Timeouts
    from tailscope.io.calibration import load_calibration
    from tailscope.runner.bench import BenchConfig, run_bench
    from tailscope.runner.loadgen import DispatchConfig
    from tailscope.runner.twin_check import (
        ANCHOR,
        COMPARED,
        LONE_ANCHOR,
        anchor_specs,
        anchored_calibration,
        compare,
        fresh_prompts,
        lone_anchor_specs,
        lone_ttfts,
        median_summary,
        merge_ttfts,
        predict,
    )
    from tailscope.sim.run import SimArgs, resolve_specs

    if requests is None and duration is None:
        raise ConfigError("give --requests N or --duration SECONDS: the check is a bounded run")
    if not 1 <= repeat <= 20:
        raise ConfigError(f"--repeat {repeat}: measure the workload 1 to 20 times")
    explicit = {
        name
        for name, value in (
            ("rate", rate),
            ("concurrency", concurrency),
            ("requests", requests),
            ("duration", duration),
        )
        if value is not None
    }
    args = SimArgs(
        calibration=calibration,
        profile=profile,
        rate=rate,
        concurrency=concurrency,
        arrival=arrival,
        requests=requests,
        duration=duration,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        seed=seed,
        db=db,
        explicit=frozenset(explicit | {"arrival", "input_tokens", "output_tokens"}),
    )
    err = Console(stderr=True)
    err.print("predicting with the twin (fit, −1σ, +1σ) …")
    pred = predict(args)
    err.print(f"measuring {url} …")
    wl = resolve_specs(args)
    cfg = BenchConfig(
        url=url,
        model=model,
        seed=seed,
        dispatch=DispatchConfig(concurrency=wl.concurrency, duration_s=wl.duration_s, drain_timeout_s=300),
        requested_rate=rate,
        timeouts=Timeouts(first_token_s=300, total_s=600),
        settings={"twin_check": str(calibration), **wl.settings},
        profile_name=wl.profile,
        handle_signals=False,
        probe="twin-check",
    )
    anchors: list[tuple[float, float]] = []
    lone: list[dict[int, list[float]]] = []
    from tailscope.store.runs import RunStore

    store = RunStore(db)
    twin = load_calibration(calibration).twin
    max_prompt = (twin.facts.max_model_len or 2048) - 64 - LONE_ANCHOR[2] if twin is not None else None

    def measure_anchor(when: str) -> None:
        err.print(
            f"anchor ({when}): {ANCHOR[1]} requests at concurrency {ANCHOR[0]}, then "
            f"{len(LONE_ANCHOR[0]) * LONE_ANCHOR[1] + 1} one at a time …"
        )
        a_cfg = replace(
            cfg,
            dispatch=DispatchConfig(concurrency=ANCHOR[0], drain_timeout_s=120),
            requested_rate=None,
            settings={"twin_check_anchor": when, "twin_check": str(calibration)},
            profile_name=None,
        )
        res = run_async(run_bench(a_cfg, iter(anchor_specs(seed)), store=store))
        summary = res.summary.to_dict()
        anchors.append(
            (
                float((summary.get("ttft_ms") or {}).get("p50") or 0.0),
                float((summary.get("tpot_ms") or {}).get("p50") or 0.0),
            )
        )
        specs = lone_anchor_specs(seed, 1_000 + len(lone), max_prompt)
        l_cfg = replace(
            a_cfg,
            dispatch=DispatchConfig(concurrency=1, drain_timeout_s=120),
            settings={"twin_check_anchor": when + " (lone requests)", "twin_check": str(calibration)},
        )
        lone.append(lone_ttfts(run_async(run_bench(l_cfg, iter(specs), store=store)).records, specs))

    runs = []
    for k in range(repeat):
        if anchor:
            measure_anchor(f"before measurement {k + 1}")
        if k:
            err.print(f"measuring again ({k + 1} of {repeat}) …")
        specs = fresh_prompts(resolve_specs(args).specs, k) if k else wl.specs
        runs.append(run_async(run_bench(cfg, specs, store=store)))
    measured = runs[-1]
    summaries = [r.summary.to_dict() for r in runs]
    msum = summaries[0] if repeat == 1 else median_summary(summaries)
    anchor_info: dict[str, Any] | None = None
    if anchor:
        measure_anchor("after")
        unanchored = compare(pred, msum, tolerance)
        lone_now = merge_ttfts(lone)
        with tempfile.TemporaryDirectory() as tmp:
            a = anchored_calibration(calibration, [b for _, b in anchors], Path(tmp), lone_now)
            speed = f"the server decodes at {a.decode:.2f}×"
            if a.prefill is not None:
                speed += f" and prefills at {a.prefill:.2f}×"
            else:
                speed += " (no lone-request reference in the twin: prefill path as calibrated)"
            err.print(f"anchored: {speed} the calibration's time; predicting again …")
            pred = predict(replace(args, calibration=a.path))
        anchor_info = {
            "measured_ttft_ms": [a for a, _ in anchors],
            "measured_tpot_ms": [b for _, b in anchors],
            "lone_ttft_ms": {str(k): v for k, v in lone_now.items()},
            "decode_factor": a.decode,
            "prefill_factor": a.prefill,
            "unanchored_errors": {f"{r['metric']}.{r['percentile']}": r["error"] for r in unanchored["rows"]},
        }
    result = compare(pred, msum, tolerance)
    if anchor_info is not None:
        result["anchor"] = anchor_info
    result["prediction_run"] = pred.outcome.run.id
    result["measured_run"] = measured.run.id
    if repeat > 1:
        result["measured_runs"] = [r.run.id for r in runs]
        result["repeats"] = {f"{key}.{pct}": [(s.get(key) or {}).get(pct) for s in summaries] for key, pct in COMPARED}
    _render_check(stdout_console(), result)
    if json_out is not None:
        try:
            json_out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--json {json_out}: cannot write it ({exc.strerror})") from None
    if html_out is not None:
        from tailscope.metrics.document import run_to_json
        from tailscope.report.html import ReportRun, render_compare_report, write_html

        items = [
            ReportRun(run_to_json(measured.run), {**summaries[-1], "server": measured.server}, measured.records,
                      measured.samples),
            ReportRun(run_to_json(pred.outcome.run), pred.outcome.summary, pred.outcome.records),
        ]  # fmt: skip
        write_html(html_out, render_compare_report(items))
        err.print(f"wrote {html_out}")
    if not result["passed"]:
        raise _CheckFailed(f"the twin missed by more than {tolerance:.0%} on {', '.join(result['failed'])}")


class _CheckFailed(TailscopeError):
    exit_code = 1


def _render_check(con: Console, result: dict[str, Any]) -> None:
    t = Table(title="twin check: predicted vs measured", title_justify="left", show_edge=False, header_style="bold")
    for c in ("metric", "pct", "predicted", "interval (±1σ)", "measured", "error", ""):
        t.add_column(c, justify="left" if c in ("metric", "pct", "") else "right")

    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:,.1f}"

    for r in result["rows"]:
        err = r["error"]
        mark = "" if not r["gated"] else ("[green]ok[/]" if r["within"] else "[red]MISS[/]")
        interval = "" if r["low"] is None else f"{f(r['low'])}–{f(r['high'])}"
        t.add_row(
            r["metric"],
            r["percentile"],
            f(r["predicted"]),
            interval,
            f(r["measured"]),
            "—" if err is None else f"{err:+.1%}",
            mark,
        )
    con.print(t)
    a = result.get("anchor")
    if a:
        un = a["unanchored_errors"]
        gated = ", ".join(f"{k} {v:+.0%}" for k, v in un.items() if v is not None and k.split(".")[1] in ("p50", "p90"))
        prefill = f", prefill times ×{a['prefill_factor']:.2f}" if a.get("prefill_factor") else ""
        con.print(
            f"anchored: decode times ×{a['decode_factor']:.2f} the calibration's (anchor TPOT "
            f"{' / '.join(f'{m:.2f}' for m in a['measured_tpot_ms'])} ms){prefill}; without the anchor: {gated}"
        )
    verdict = "[green]PASS[/]" if result["passed"] else "[red]FAIL[/]"
    con.print(f"{verdict} (tolerance {result['tolerance']:.0%} on TTFT and TPOT p50/p90)")
