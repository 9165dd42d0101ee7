"""AIPerf's ``profile_export.jsonl`` (and ``profile_export_aiperf.json`` beside it) as a :class:`PeerRun`."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from tailscope.errors import ContractError
from tailscope.files import read_user_text
from tailscope.io.peers._common import _completed, _error_class, _iso, _num, _obj, _spread
from tailscope.io.peers._run import PeerRun
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource

_UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0}


def _metric(metrics: dict[str, Any], key: str, where: str) -> Any:
    m = metrics.get(key)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise ContractError(f"{where}: metrics.{key} must be {{value, unit}} (got {m!r})")
    return m["value"]


def _ms(metrics: dict[str, Any], key: str, where: str) -> Any:
    m = metrics.get(key)
    value = _metric(metrics, key, where)
    if value is None:
        return None
    scale = _UNITS.get(str(m.get("unit", "ms")), 1.0) if isinstance(m, dict) else 1.0
    if isinstance(value, list):
        return [(_num(v, f"{where}: metrics.{key}") or 0.0) * scale for v in value]
    return (_num(value, f"{where}: metrics.{key}") or 0.0) * scale


def _aiperf(text: str, path: Path) -> PeerRun:
    src = str(path)
    rows: list[tuple[int, dict[str, Any]]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ContractError(
                f"{src}:{i}: invalid JSON ({exc.msg}); expected AIPerf's profile_export.jsonl"
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("metadata"), dict):
            raise ContractError(f"{src}:{i}: expected a record with metadata and metrics (profile_export.jsonl)")
        rows.append((i, row))
    if not rows:
        raise ContractError(f"{src}: no records (AIPerf's profile_export.jsonl has one per line)")

    def start_of(i: int, row: dict[str, Any]) -> int:
        md = row["metadata"]
        v = md.get("request_start_ns", md.get("timestamp_ns"))
        if isinstance(v, bool) or not isinstance(v, int):
            raise ContractError(f"{src}:{i}: metadata.request_start_ns must be an integer (Unix ns; got {v!r})")
        return v

    t0 = min(start_of(i, r) for i, r in rows)
    multi_turn = any(int(r["metadata"].get("turn_index") or 0) > 0 for _, r in rows)
    usage_differs = 0
    records = []
    for rid, (i, row) in enumerate(rows):
        where = f"{src}:{i}"
        md, metrics = row["metadata"], row.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise ContractError(f"{where}: metrics must be an object")
        sent = start_of(i, row) - t0
        warm = str(md.get("benchmark_phase") or md.get("credit_phase") or "profiling") == "warmup"
        session = str(md.get("x_correlation_id")) if multi_turn and md.get("x_correlation_id") else None
        turn = int(md.get("turn_index") or 0) if session else None
        isl = _metric(metrics, "input_sequence_length", where) or _metric(metrics, "error_isl", where)
        err = row.get("error")
        end_abs = md.get("request_end_ns")
        end = end_abs - t0 if isinstance(end_abs, int) and not isinstance(end_abs, bool) else None
        # what the row's record is, failed or not: its send (AIPerf records no intended time), session, prompt
        record = partial(
            RequestRecord,
            id=rid,
            scheduled_ns=sent,
            sent_ns=sent,
            session_id=session,
            turn=turn,
            input_tokens=int(isl) if isinstance(isl, int | float) else None,
            warmup=warm,
        )
        if err or md.get("was_cancelled"):
            e = err if isinstance(err, dict) else {}
            code = e.get("code") if isinstance(e.get("code"), int) else None
            detail = f"{e.get('type') or ''}: {e.get('message') or ''}".strip(": ")
            records.append(
                record(
                    first_token_ns=None,
                    end_ns=end,
                    status=Status.ERROR,
                    error=ErrorClass.CANCELLED if md.get("was_cancelled") else _error_class(detail, code),
                    error_detail=detail[:500] or None,
                    http_status=code,
                )
            )
            continue
        ttft = _ms(metrics, "time_to_first_token", where)
        lat = _ms(metrics, "request_latency", where)
        if ttft is None or lat is None:
            raise ContractError(
                f"{where}: metrics.time_to_first_token and request_latency are required (a streaming AIPerf run)"
            )
        icl = _ms(metrics, "inter_chunk_latency", where) or []
        osl = _metric(metrics, "output_sequence_length", where) or _metric(metrics, "output_token_count", where) or 1
        usage = _metric(metrics, "usage_completion_tokens", where)
        if isinstance(usage, int | float) and isinstance(osl, int | float) and int(usage) != int(osl):
            usage_differs += 1
        n = int(_num(osl, f"{where}: metrics.output_sequence_length") or 0)
        first = sent + round(ttft * 1e6)
        chunks = [first]
        acc = ttft
        for g in icl if isinstance(icl, list) else []:
            acc += g
            chunks.append(sent + round(acc * 1e6))
        last = sent + round(lat * 1e6)
        if len(chunks) == 1 and n > 1 and last > first:
            chunks.append(last)
        tokens = (1, *_spread(n - 1, len(chunks) - 1)) if len(chunks) > 1 and n >= 1 else _spread(n, len(chunks))
        records.append(
            _completed(
                record,
                chunks,
                tokens,
                end_ns=last,
                output_tokens=n,
                tokens_source=TokensSource.TOKENIZER,
                server_request_id=str(md["x_request_id"]) if md.get("x_request_id") else None,
            )
        )
    reported, model, url, settings = _aiperf_aggregate(path)
    return PeerRun(
        tool="aiperf",
        source=src,
        records=tuple(records),
        model=model,
        url=url,
        started_at=_iso(t0 / 1e9),
        reported=reported,
        settings=settings,
        notes=(
            "scheduled = sent: AIPerf records no intended send time",
            *(
                [
                    f"{usage_differs} request(s): AIPerf's tokenizer counted a different output length than the "
                    "server's usage (usage_completion_tokens); the records keep AIPerf's count (its ITL uses it)"
                ]
                if usage_differs
                else []
            ),
        ),
    )


def _aiperf_aggregate(path: Path) -> tuple[dict[str, Any], str, str, dict[str, Any]]:
    """The tool's own figures from ``profile_export_aiperf.json`` beside the JSONL, when it is there."""
    agg_path = path.with_name("profile_export_aiperf.json")
    if not agg_path.is_file():
        return {}, "", "", {}
    try:
        agg = json.loads(read_user_text(agg_path, what="aiperf aggregate", error=ContractError))
    except json.JSONDecodeError as exc:
        raise ContractError(f"{agg_path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(agg, dict):
        return {}, "", "", {}
    reported: dict[str, Any] = {}
    for ours, theirs in (
        ("ttft_ms", "time_to_first_token"),
        ("itl_ms", "inter_token_latency"),
        ("icl_ms", "inter_chunk_latency"),
        ("e2e_ms", "request_latency"),
    ):
        m = agg.get(theirs)
        if isinstance(m, dict):
            scale = _UNITS.get(str(m.get("unit", "ms")), 1.0)
            stats = {
                ("mean" if k == "avg" else k): float(v) * scale
                for k, v in m.items()
                if k in ("avg", "p50", "p90", "p95", "p99", "min", "max") and isinstance(v, int | float)
            }
            if "p50" in stats:
                stats["median"] = stats["p50"]
            reported.setdefault("metrics", {})[ours] = stats
    count = agg.get("request_count")
    if isinstance(count, dict) and isinstance(count.get("avg"), int | float):
        reported["completed"] = int(count["avg"])
    errors = agg.get("error_request_count")
    if isinstance(errors, dict) and isinstance(errors.get("avg"), int | float):
        reported["failed"] = int(errors["avg"])
    summary = agg.get("error_summary")
    if "failed" not in reported and isinstance(summary, list):
        reported["failed"] = sum(int(_obj(e).get("count") or 0) for e in summary)
    dur = agg.get("benchmark_duration")
    if isinstance(dur, dict) and isinstance(dur.get("avg"), int | float):
        reported["duration"] = float(dur["avg"])
    cfg = _obj(agg.get("input_config"))
    endpoint = _obj(cfg.get("endpoint"))
    names = endpoint.get("model_names")  # AIPerf ≤ 0.5; 0.13: input_config.models.items[].name
    items = _obj(cfg.get("models")).get("items")
    if not isinstance(names, list) and isinstance(items, list):
        names = [_obj(i).get("name") for i in items if _obj(i).get("name")]
    model = str(names[0]) if isinstance(names, list) and names else ""
    settings: dict[str, Any] = {}
    for key in ("loadgen", "phases"):
        if isinstance(cfg.get(key), dict | list):
            settings[key] = cfg[key]
    command = cfg.get("cli_command") or _obj(agg.get("run_info")).get("cli_command")
    if isinstance(command, str):
        settings["cli_command"] = command
    urls = endpoint.get("urls")
    if not endpoint.get("url") and isinstance(urls, list) and urls:
        endpoint = {**endpoint, "url": urls[0]}
    url = str(endpoint.get("url") or "")
    if url and not url.startswith(("http://", "https://")):
        url = f"http://{url}"
    return reported, model, url, settings
