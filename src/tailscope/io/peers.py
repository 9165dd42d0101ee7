"""Result files of other benchmark tools, read into tailscope's records (``tailscope runs import``).

* ``vllm``: the JSON of ``vllm bench serve --save-result --save-detailed`` (``benchmarks/benchmark_serving.py`` wrote
  the same keys): per request ``start_times`` (the client's ``perf_counter`` at send), ``ttfts``, ``itls`` (every gap
  between SSE events with a choice), ``latencies``, ``input_lens``, ``output_lens``, ``errors``; and the aggregates
  (``completed``, ``median_ttft_ms``, ``p99_itl_ms`` …). Several documents (``--append-result``) are several runs.
* ``guidellm``: ``benchmarks.json`` of ``guidellm benchmark``: ``benchmarks[].requests.{successful,errored,
  incomplete}[]`` with ``info.timings`` (``request_start``, ``first_token_iteration``, ``last_token_iteration``,
  ``token_iterations``, ``request_end``; Unix seconds) and ``benchmarks[].metrics``. One run per benchmark (a sweep
  keeps its benchmarks together as one tailscope sweep). GuideLLM keeps no per-token times: the token iterations are
  spaced evenly between the first and the last, as GuideLLM itself does.
* ``aiperf``: ``profile_export.jsonl`` of ``aiperf profile``: one record per line with ``metadata``
  (``request_start_ns``, ``benchmark_phase``, ``x_correlation_id``, ``turn_index``, ``was_cancelled``) and
  ``metrics`` (``time_to_first_token``, ``request_latency``, ``inter_chunk_latency``, ``output_sequence_length``,
  ``input_sequence_length``, each ``{value, unit}``), ``error``. A ``profile_export_aiperf.json`` beside it gives the
  tool's own aggregates and the endpoint.

Each request becomes a :class:`~tailscope.records.RequestRecord` whose times reproduce the tool's own figures when the
same records are summarized in that tool's dialect (``runs show --dialect vllm``). Every error names the file and the
line (JSON lines) or the field (JSON documents) and what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tailscope.errors import ContractError
from tailscope.files import read_user_text
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource

PEER_TOOLS = ("vllm", "guidellm", "aiperf")

#: how each tool defines what it reports (shown with every imported run; docs/workload.md § Other tools' results)
SEMANTICS: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm bench serve: TTFT is timed from the send (time.perf_counter() before the POST), not from an intended "
        "send time, so client lag and (with --max-concurrency) client queueing are not in it.",
        "First token = the first SSE event with a choice (a role-only delta counts); ITL = every gap between such "
        "events, per chunk, pooled over requests; TPOT = (E2EL - TTFT)/(output tokens - 1) per request; E2EL ends "
        "at the last event with a choice.",
        "Output tokens from the server's usage (completion_tokens) when sent, else the tokenizer over the text.",
        "Percentiles: numpy linear interpolation; failed requests are left out of every latency.",
    ),
    "guidellm": (
        "GuideLLM: TTFT from request_start (the backend's send) to the first token iteration; TPOT = (last token - "
        "request start)/output tokens includes the TTFT; ITL = (last - first token)/(output tokens - 1) is what "
        "vLLM calls TPOT; request latency ends at request_end (stream close).",
        "No per-token times are kept: token iterations are spaced evenly between the first and the last token.",
        "Percentiles: the smallest value whose cumulative share is >= q (no interpolation); GuideLLM sums the "
        "shares in floating point (np.searchsorted over np.cumsum), so where n·q is a whole number its value can be "
        "the next sample (its median of 20 values is the 11th).",
    ),
    "aiperf": (
        "AIPerf: TTFT from request_start_ns (the send) to the first content-bearing response; request latency ends "
        "at the last response; ITL = (request latency - TTFT)/(OSL - 1) per request, what vLLM calls TPOT; its "
        "per-chunk gaps are inter_chunk_latency (ICL).",
        "Output tokens counted by AIPerf's tokenizer over the response text.",
        "Percentiles: numpy linear interpolation; warmup-phase records are marked warmup.",
    ),
}


@dataclass(frozen=True, slots=True)
class PeerRun:
    """One run as another tool recorded it.

    Attributes:
        records: one record per request; times in ns since the first send of the run.
        reported: the tool's own aggregate figures as it wrote them (``completed``, ``failed``, ``duration_s``,
            ``metrics``: ``{ttft_ms: {mean, median, p50, p90, p99, …}, itl_ms, tpot_ms, e2e_ms}``); empty when the
            file has none.
        settings: the load as the tool stated it (rate, concurrency, prompts, …).
        started_at: ISO 8601 UTC of the first send (or of the file's date), or None when the file has none.
        notes: what the import had to approximate.
    """

    tool: str
    source: str
    records: tuple[RequestRecord, ...]
    model: str = ""
    url: str = ""
    endpoint: str = "chat"
    started_at: str | None = None
    reported: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    label: str = ""


def read_peer_results(path: str | os.PathLike[str], *, tool: str) -> list[PeerRun]:
    """The runs in a result file written by ``tool`` (vllm, guidellm or aiperf).

    Raises:
        ContractError: an unknown tool, a file that cannot be read, or content that is not that tool's result
            (``file:line: …`` or ``file: field: …``).
    """
    name = tool.strip().lower()
    if name not in PEER_TOOLS:
        raise ContractError(f"--from {tool!r}: use one of {', '.join(PEER_TOOLS)}")
    text = read_user_text(path, what=f"{name} result", error=ContractError)
    src = str(path)
    if name == "vllm":
        return [_vllm(doc, f"{src}:{line}" if line else src) for line, doc in _json_docs(text, src)]
    if name == "guidellm":
        docs = _json_docs(text, src)
        if len(docs) != 1:
            raise ContractError(f"{src}: expected one JSON document (GuideLLM's benchmarks.json)")
        return _guidellm(docs[0][1], src)
    return [_aiperf(text, Path(path))]


# ----------------------------------------------------------------------------------------------------------- helpers
def _json_docs(text: str, src: str) -> list[tuple[int, Any]]:
    """One JSON document, or one per line (vLLM's --append-result); (line number or 0, document)."""
    try:
        return [(0, json.loads(text))]
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise ContractError(f"{src}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    docs: list[tuple[int, Any]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                docs.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ContractError(f"{src}:{i}: invalid JSON ({exc.msg})") from None
    return docs


def _num(value: Any, where: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ContractError(f"{where}: expected a number (got {value!r})")
    return float(value)


def _list(doc: dict[str, Any], key: str, n: int | None, where: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ContractError(f"{where}: {key} must be a list (got {type(value).__name__})")
    if n is not None and len(value) != n:
        raise ContractError(f"{where}: {key} has {len(value)} entries, start_times {n}")
    return value


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (optional sections of a peer's file)."""
    return value if isinstance(value, dict) else {}


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _spread(tokens: int, chunks: int) -> tuple[int, ...]:
    """``tokens`` over ``chunks`` as evenly as integers allow (earlier chunks get the remainder)."""
    if chunks <= 0:
        return ()
    q, r = divmod(max(tokens, 0), chunks)
    return tuple(q + (1 if i < r else 0) for i in range(chunks))


def _error_class(text: str, code: int | None = None) -> ErrorClass:
    if code == 429:
        return ErrorClass.HTTP_429
    if code == 401:
        return ErrorClass.HTTP_401
    if code is not None and 500 <= code < 600:
        return ErrorClass.HTTP_5XX
    if code is not None and 400 <= code < 500 and code != 499:
        return ErrorClass.HTTP_4XX
    low = text.lower()
    if "cancel" in low:
        return ErrorClass.CANCELLED
    if "timeout" in low or "timed out" in low:
        return ErrorClass.TIMEOUT_TOTAL
    if "connect" in low:
        return ErrorClass.CONNECT
    return ErrorClass.OTHER


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stats(src: dict[str, Any], prefix_fmt: str, metric: str) -> dict[str, float]:
    """vLLM's ``mean_ttft_ms``, ``median_ttft_ms``, ``p99_ttft_ms`` … as ``{mean, median, p99, …}``."""
    out: dict[str, float] = {}
    for key, value in src.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        for stat in ("mean", "median", "std"):
            if key == prefix_fmt.format(stat=stat, metric=metric):
                out[stat] = float(value)
        if key.startswith("p") and key.endswith(f"_{metric}_ms"):
            out[key[: -len(f"_{metric}_ms")]] = float(value)
    return out


# -------------------------------------------------------------------------------------------------------------- vLLM
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
        if err:
            records.append(
                RequestRecord(
                    id=i,
                    scheduled_ns=scheduled,
                    sent_ns=sent,
                    first_token_ns=None,
                    end_ns=sent + _ns(lat),
                    status=Status.ERROR,
                    input_tokens=n_in,
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
            RequestRecord(
                id=i,
                scheduled_ns=scheduled,
                sent_ns=sent,
                first_token_ns=chunks[0],
                end_ns=sent + _ns(lat),
                status=Status.OK,
                input_tokens=n_in,
                output_tokens=n_out,
                tokens_source=TokensSource.USAGE,
                chunk_times_ns=tuple(chunks),
                chunk_tokens=tokens,
                stream_end_ns=sent + _ns(lat),
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


# ---------------------------------------------------------------------------------------------------------- GuideLLM
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
        if status != "successful":
            info = _obj(req.get("info"))
            detail = str(info.get("error") or req.get("error") or "")
            records.append(
                RequestRecord(
                    id=rid,
                    scheduled_ns=sched,
                    sent_ns=sent,
                    first_token_ns=None,
                    end_ns=end,
                    status=Status.ERROR if status == "errored" else Status.INCOMPLETE,
                    input_tokens=n_in,
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
            RequestRecord(
                id=rid,
                scheduled_ns=sched,
                sent_ns=sent,
                first_token_ns=first,
                end_ns=last,
                status=Status.OK,
                input_tokens=n_in,
                output_tokens=n,
                tokens_source=TokensSource.USAGE,
                chunk_times_ns=chunks,
                chunk_tokens=tokens,
                stream_end_ns=end if end is not None else last,
                first_event_ns=first,
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


# ------------------------------------------------------------------------------------------------------------ AIPerf
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
        if err or md.get("was_cancelled"):
            e = err if isinstance(err, dict) else {}
            code = e.get("code") if isinstance(e.get("code"), int) else None
            detail = f"{e.get('type') or ''}: {e.get('message') or ''}".strip(": ")
            records.append(
                RequestRecord(
                    id=rid,
                    scheduled_ns=sent,
                    sent_ns=sent,
                    first_token_ns=None,
                    end_ns=end,
                    status=Status.ERROR,
                    session_id=session,
                    turn=turn,
                    input_tokens=int(isl) if isinstance(isl, int | float) else None,
                    error=ErrorClass.CANCELLED if md.get("was_cancelled") else _error_class(detail, code),
                    error_detail=detail[:500] or None,
                    http_status=code,
                    warmup=warm,
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
            RequestRecord(
                id=rid,
                scheduled_ns=sent,
                sent_ns=sent,
                first_token_ns=first,
                end_ns=last,
                status=Status.OK,
                session_id=session,
                turn=turn,
                input_tokens=int(isl) if isinstance(isl, int | float) else None,
                output_tokens=n,
                tokens_source=TokensSource.TOKENIZER,
                chunk_times_ns=tuple(chunks),
                chunk_tokens=tokens,
                stream_end_ns=last,
                first_event_ns=first,
                warmup=warm,
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
