"""vLLM bench's result JSON (``vllm bench serve --save-result --save-detailed``) as a :class:`PeerRun`."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

from tailscope.errors import ContractError
from tailscope.io.peers._common import _completed, _error_class, _list, _ns, _num, _spread, _stats
from tailscope.io.peers._run import PeerRun
from tailscope.records import RequestRecord, Status, TokensSource


def _vllm(doc: Any, src: str) -> PeerRun:
    if not isinstance(doc, dict):
        raise ContractError(f"{src}: expected the JSON object of `vllm bench serve --save-result`")
    if "start_times" not in doc or "ttfts" not in doc:
        raise ContractError(
            f"{src}: no per-request data (start_times, ttfts, itls): re-run vllm bench serve with --save-result "
            "--save-detailed"
        )
    starts = [_num(v, f"{src}: start_times[{i}]") for i, v in enumerate(_list(doc, "start_times", None, src))]
    n = len(starts)
    ttfts = _list(doc, "ttfts", n, src)
    itls = _list(doc, "itls", n, src)
    lats = _list(doc, "latencies", n, src)
    in_lens = _list(doc, "input_lens", n, src)
    out_lens = _list(doc, "output_lens", n, src)
    errors: list[Any] = doc["errors"] if isinstance(doc.get("errors"), list) else [""] * n
    queue = doc.get("queue_times") if isinstance(doc.get("queue_times"), list) else None
    rate = doc.get("request_rate")
    open_loop = isinstance(rate, int | float) and rate not in (float("inf"),) and queue is not None
    t0 = min((s for s in starts if s is not None), default=0.0)
    records: list[RequestRecord] = []
    for i in range(n):
        where = f"{src}: request {i}"
        sent = _ns((starts[i] or 0.0) - t0)
        err = str(errors[i] or "") if i < len(errors) else ""
        lat = _num(lats[i], f"{where}: latencies") or 0.0
        scheduled = sent
        if open_loop and queue is not None and i < len(queue):
            scheduled = sent - _ns(_num(queue[i], f"{where}: queue_times") or 0.0)
        n_in = int(_num(in_lens[i], f"{where}: input_lens") or 0)
        record = partial(RequestRecord, id=i, scheduled_ns=scheduled, sent_ns=sent, input_tokens=n_in)
        if err:
            records.append(
                record(
                    first_token_ns=None,
                    end_ns=sent + _ns(lat),
                    status=Status.ERROR,
                    error=_error_class(err),
                    error_detail=err.strip().splitlines()[-1][:500] if err.strip() else err,
                )
            )
            continue
        ttft = _num(ttfts[i], f"{where}: ttfts") or 0.0
        gaps = itls[i]
        if not isinstance(gaps, list):
            raise ContractError(f"{where}: itls must be a list of seconds (got {gaps!r})")
        events = [sent + _ns(ttft)]
        acc = ttft
        for g in gaps:
            acc += _num(g, f"{where}: itls") or 0.0
            events.append(sent + _ns(acc))
        n_out = int(_num(out_lens[i], f"{where}: output_lens") or 0)
        first_event = events[0]
        if n_out >= 1 and len(events) == n_out + 1:  # the first event was a role-only delta (chat): no token
            chunks, tokens = events[1:], (1,) * n_out
        else:
            chunks, tokens = events, _spread(n_out, len(events))
        records.append(
            _completed(
                record,
                chunks,
                tokens,
                end_ns=sent + _ns(lat),
                output_tokens=n_out,
                tokens_source=TokensSource.USAGE,
                first_event_ns=first_event,
            )
        )
    reported: dict[str, Any] = {
        k: doc[k]
        for k in (
            "completed",
            "failed",
            "duration",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "total_input_tokens",
            "total_output_tokens",
        )
        if isinstance(doc.get(k), int | float)
    }
    metrics = {
        f"{m if m != 'e2el' else 'e2e'}_ms": s
        for m in ("ttft", "tpot", "itl", "e2el")
        if (s := _stats(doc, "{stat}_{metric}_ms", m))
    }
    if metrics:
        reported["metrics"] = metrics
    settings = {
        k: doc.get(k)
        for k in (
            "backend",
            "endpoint_type",
            "num_prompts",
            "request_rate",
            "burstiness",
            "max_concurrency",
            "tokenizer_id",
            "label",
            "date",
        )
        if k in doc
    }
    started = None
    if isinstance(doc.get("date"), str):
        try:
            started = datetime.strptime(doc["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC).isoformat()
        except ValueError:
            started = None
    notes = []
    if not open_loop:
        notes.append("scheduled = sent: vLLM keeps no intended send time (closed loop or no queue_times)")
    else:
        notes.append("scheduled = send - client queue time (vLLM's queue_times)")
    if started:
        notes.append("started_at is vLLM's local `date` taken as UTC (the file has no time zone)")
    return PeerRun(
        tool="vllm",
        source=src,
        records=tuple(records),
        model=str(doc.get("model_id") or ""),
        endpoint="chat" if "chat" in str(doc.get("backend", "")) else "completions",
        started_at=started,
        reported=reported,
        settings=settings,
        notes=tuple(notes),
        label=str(doc.get("label") or ""),
    )
