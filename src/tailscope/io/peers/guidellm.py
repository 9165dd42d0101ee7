r"""GuideLLM's ``benchmarks.json`` as :class:`PeerRun`\ s (one per benchmark)."""

from __future__ import annotations

from functools import partial
from typing import Any

from tailscope.errors import ContractError
from tailscope.io.peers._common import _completed, _error_class, _iso, _ns, _num, _obj, _spread
from tailscope.io.peers._run import PeerRun
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource


def _guidellm(doc: Any, src: str) -> list[PeerRun]:
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ContractError(f"{src}: benchmarks: expected GuideLLM's benchmarks.json (an object with a list)")
    args = _obj(doc.get("args")) or _obj(_obj(_obj(doc.get("config")).get("spec")).get("backend"))
    runs = []
    for b_i, bench in enumerate(doc["benchmarks"]):
        where = f"{src}: benchmarks[{b_i}]"
        if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
            raise ContractError(f"{where}.requests: expected {{successful, errored, incomplete}} lists")
        runs.append(_guidellm_bench(bench, args, where, src))
    if not runs:
        raise ContractError(f"{src}: benchmarks: the file holds no benchmark")
    return runs


def _timing(req: dict[str, Any], where: str) -> dict[str, float | None]:
    info = _obj(req.get("info"))
    t = _obj(info.get("timings"))

    def pick(*keys: str, obj: dict[str, Any]) -> float | None:
        for k in keys:
            if obj.get(k) is not None:
                return _num(obj[k], f"{where}: {k}")
        return None

    return {
        "target": pick("targeted_start", obj=t),
        "start": pick("request_start", "resolve_start", obj=t) or pick("start_time", "request_start_time", obj=req),
        "first": pick("first_token_iteration", obj=t) or pick("first_token_time", obj=req),
        "last": pick("last_token_iteration", obj=t) or pick("last_token_time", obj=req),
        "end": pick("request_end", "resolve_end", obj=t) or pick("end_time", "request_end_time", obj=req),
        "iters": pick("token_iterations", obj=t),
    }


def _tokens(req: dict[str, Any], key: str, metrics_key: str) -> int | None:
    v = req.get(key)
    if isinstance(v, int | float) and not isinstance(v, bool):
        return int(v)
    m = req.get(metrics_key)
    if isinstance(m, dict):
        for k in ("total_tokens", "text_tokens"):
            if isinstance(m.get(k), int | float):
                return int(m[k])
    return None


def _guidellm_bench(bench: dict[str, Any], args: dict[str, Any], where: str, src: str) -> PeerRun:
    groups = bench["requests"]
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for status in ("successful", "errored", "incomplete"):
        items = groups.get(status) or []
        if not isinstance(items, list):
            raise ContractError(f"{where}.requests.{status}: expected a list")
        rows.extend((status, i, r) for i, r in enumerate(items) if isinstance(r, dict))
    if not rows:
        raise ContractError(f"{where}.requests: no per-request data (GuideLLM kept no request samples)")
    timings = [_timing(r, f"{where}.requests.{s}[{i}].info.timings") for s, i, r in rows]
    starts = [t["start"] for t in timings if t["start"] is not None]
    if not starts:
        raise ContractError(f"{where}.requests: no request has info.timings.request_start")
    t0 = min(starts)
    records = []
    for rid, ((status, i, req), t) in enumerate(zip(rows, timings, strict=True)):
        w = f"{where}.requests.{status}[{i}]"
        start = t["start"]
        if start is None:
            raise ContractError(f"{w}.info.timings.request_start: missing")
        sent = _ns(start - t0)
        sched = _ns(t["target"] - t0) if t["target"] is not None and t["target"] <= start else sent
        end = _ns(t["end"] - t0) if t["end"] is not None else None
        n_in = _tokens(req, "prompt_tokens", "input_metrics")
        n_out = _tokens(req, "output_tokens", "output_metrics")
        record = partial(RequestRecord, id=rid, scheduled_ns=sched, sent_ns=sent, input_tokens=n_in)
        if status != "successful":
            info = _obj(req.get("info"))
            detail = str(info.get("error") or req.get("error") or "")
            records.append(
                record(
                    first_token_ns=None,
                    end_ns=end,
                    status=Status.ERROR if status == "errored" else Status.INCOMPLETE,
                    error=_error_class(detail) if status == "errored" else ErrorClass.CANCELLED,
                    error_detail=detail[:500] or None,
                )
            )
            continue
        if t["first"] is None or t["last"] is None:
            raise ContractError(f"{w}.info.timings: first_token_iteration and last_token_iteration are required")
        first, last = _ns(t["first"] - t0), _ns(t["last"] - t0)
        n = n_out if n_out is not None else int(t["iters"] or 1)
        iters = max(1, int(t["iters"] or (n if n > 0 else 1)))
        if iters <= 1 or n <= 1:
            chunks: tuple[int, ...] = (first,) if last == first else (first, last)
            tokens = _spread(n, len(chunks)) if len(chunks) == 1 else (1 if n else 0, max(n - 1, 0))
        else:
            step = (last - first) / (iters - 1)
            chunks = (*(first + round(step * k) for k in range(iters - 1)), last)
            tokens = (1, *_spread(n - 1, iters - 1))
        records.append(
            _completed(
                record,
                chunks,
                tokens,
                end_ns=last,
                output_tokens=n,
                tokens_source=TokensSource.USAGE,
                stream_end_ns=end,
            )
        )
    metrics = _obj(bench.get("metrics"))
    reported: dict[str, Any] = {}
    totals = metrics.get("request_totals")
    if isinstance(totals, dict):
        reported |= {
            "completed": totals.get("successful"),
            "failed": totals.get("errored"),
            "incomplete": totals.get("incomplete"),
        }
    for ours, theirs, scale in (
        ("ttft_ms", "time_to_first_token_ms", 1.0),
        ("itl_ms", "inter_token_latency_ms", 1.0),
        ("tpot_ms", "time_per_output_token_ms", 1.0),
        ("e2e_ms", "request_latency", 1000.0),
    ):
        dist = metrics.get(theirs)
        ok = dist.get("successful") if isinstance(dist, dict) else None
        if isinstance(ok, dict):
            stats = {k: float(ok[k]) * scale for k in ("mean", "median") if isinstance(ok.get(k), int | float)}
            pct = _obj(ok.get("percentiles"))
            stats |= {
                k: float(v) * scale
                for k, v in pct.items()
                if k in ("p50", "p90", "p95", "p99") and isinstance(v, int | float)
            }
            reported.setdefault("metrics", {})[ours] = stats
    if isinstance(bench.get("duration"), int | float):
        reported["duration"] = bench["duration"]
    config = bench.get("config") if isinstance(bench.get("config"), dict) else bench.get("args") or {}
    strategy = config.get("strategy") if isinstance(config, dict) else None
    settings: dict[str, Any] = {"strategy": strategy} if isinstance(strategy, dict) else {}
    notes = ["token iterations spaced evenly between the first and last token (GuideLLM keeps no per-token times)"]
    completed = reported.get("completed")
    n_ok = sum(1 for s, _, _ in rows if s == "successful")
    if isinstance(completed, int) and completed > n_ok:
        notes.append(
            f"GuideLLM kept {n_ok} of {completed} successful requests (request sampling): the records are "
            "that sample; its own figures cover all"
        )
    model = args.get("model") or (strategy or {}).get("model") or ""
    target = args.get("target") or ""
    stype = str((strategy or {}).get("type_") or (strategy or {}).get("type") or "")
    return PeerRun(
        tool="guidellm",
        source=src,
        records=tuple(records),
        model=str(model or ""),
        url=str(target or ""),
        started_at=_iso(t0),
        reported=reported,
        settings=settings,
        notes=tuple(notes),
        label=stype,
    )
