"""The command-line spelling of the library's options, for the front ends: a :class:`Flag` per option.

:data:`BENCH_FLAGS` has one per field of :class:`~tailscope.runner.options.BenchOptions` that ``tailscope bench``
sets, its default the field's own (the documented default for the fields a profile can set); :data:`ENGINE_FLAGS`
the engine model of ``sim`` and ``serve``; :data:`SIM_FLAGS` the keyword arguments of :func:`tailscope.simulate`.
Plain data (no typer): the CLI builds its options from it, so a flag's spelling, help and default are written once;
the workload flags of bench, sim and twin check are the same entries (:func:`pick`). The tests hold each default to
the API's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from tailscope.runner.options import DEFAULTS, BenchOptions


@dataclass(frozen=True, slots=True)
class Flag:
    """One option of a command: its parameter name, command-line type, default, declarations and help.

    Attributes:
        name: the parameter (and :class:`BenchOptions` field) name.
        type: the type the command line parses (``str``, ``int | None``, ``Path | None``, ``list[str]``, …).
        default: the value when the flag is not given (a tuple for a repeatable flag; ``...``: required).
        decls: the flag's spellings, space-separated: ``"--requests -n --num-prompts"``; ``"--a/--no-a"`` for an
            on/off pair.
        help: the one-line help.
        metavar: the value's name in the help, when not the type's.
    """

    name: str
    type: Any
    default: Any
    decls: str
    help: str | None
    metavar: str | None = None

    def but(self, **changes: Any) -> Flag:
        """A copy with some attributes changed (another command's default or help)."""
        return replace(self, **changes)


def _field(name: str, type_: Any, decls: str, help_: str, metavar: str | None = None) -> Flag:
    """The flag of a :class:`BenchOptions` field; its default is the field's (the documented one if None)."""
    default = DEFAULTS[name] if name in DEFAULTS else _FIELDS[name].default
    return Flag(name, type_, default, decls, help_, metavar)


_FIELDS = {f.name: f for f in fields(BenchOptions)}

# fmt: off
#: ``tailscope bench``'s flags of :class:`BenchOptions` fields, in the order of its ``--help``
BENCH_FLAGS: dict[str, Flag] = {f.name: f for f in (
    _field("url", str | None, "--url", (
        "API root of the target (http://HOST:PORT). Omit to run the built-in simulated engine.")),
    _field("model", str | None, "--model", "Model name to request (default: the first listed)."),
    _field("endpoint", str, "--endpoint", "chat (/v1/chat/completions) or completions."),
    _field("profile", Path | None, "--profile", "Workload profile YAML (flags override its fields)."),
    _field("concurrency", int | None, "--concurrency -c --max-concurrency", (
        "Closed loop: requests kept in flight (default 1). With --rate: the most in flight (a capped open loop).")),
    _field("stagger", float | None, "--stagger", (
        "Closed loop: start the clients over this many seconds (default: all at once).")),
    _field("rate", float | None, "--rate -r --request-rate", "Open loop: requests per second."),
    _field("arrival", str, "--arrival", "Open-loop process: constant, poisson or gamma."),
    _field("burstiness", float, "--burstiness", "Gamma shape (<1 burstier, 1 = Poisson)."),
    _field("requests", int | None, "--requests -n --num-prompts", "Stop after N requests (warmup included)."),
    _field("duration", float | None, "--duration", "Stop starting requests after this many seconds."),
    _field("warmup", int, "--warmup", "First N requests are warmup: stored, excluded from statistics."),
    _field("input_tokens", str, "--input-tokens", "N, uniform:A:B, normal:M:S, lognormal:MED:SIG."),
    _field("output_tokens", str, "--output-tokens", "Same forms as --input-tokens (max_tokens)."),
    _field("seed", int, "--seed", "Seed for lengths, prompts and arrivals."),
    _field("slo", list[str], "--slo", "SLO like ttft_p99=1.5s or tpot_p99=60ms (repeatable)."),
    _field("tokenizer", Path | None, "--tokenizer", "tokenizer.json for exact prompt/token counts."),
    _field("api_key_env", str, "--api-key-env", "Environment variable holding the key."),
    _field("ignore_eos", bool, "--ignore-eos/--no-ignore-eos", "Send ignore_eos (vLLM/SGLang)."),
    _field("continuous_usage", bool, "--continuous-usage/--no-continuous-usage", "Ask vLLM for usage on every chunk."),
    _field("timeout_connect", float, "--timeout-connect", "Connect timeout (s)."),
    _field("timeout_first_token", float, "--timeout-first-token", "First-token timeout (s)."),
    _field("timeout_total", float, "--timeout-total", "Whole-request timeout (s)."),
    _field("metrics_url", str, "--metrics-url", "Prometheus URL to scrape: auto, off or a URL."),
    _field("scrape_interval", float, "--scrape-interval", "Seconds between /metrics scrapes."),
    _field("max_rate", float | None, "--max-rate", "Refuse schedules faster than this (req/s)."),
    _field("workers", str | None, "--workers", (
        "Spread the load over N worker processes (Ray actors with --ray), or auto: as many as the projected "
        "token-event rate needs; docs/scale-out.md.")),
    _field("ray", str | None, "--ray", (
        "Run the --workers as Ray actors: auto (running cluster), local, or a cluster address.")),
    _field("builtin_model", str, "--builtin-model", "Model of the built-in engine."),
    _field("builtin_gpu", str, "--builtin-gpu", "GPU of the built-in engine."),
    _field("http_client", str, "--http-client", "raw (lean, stamps tokens at the socket; default) or aiohttp."),
    _field("arrival_stamp", str, "--arrival-stamp", (
        "auto (default: kernel where possible), kernel (the kernel's receive time; raw client, Linux, plain "
        "TCP) or user (a read stamped when the event loop delivers it).")),
    _field("replay", Path | None, "--replay", (
        "Replay a trace (JSONL timestamp_s/input_tokens/output_tokens, Mooncake or Azure CSV).")),
    _field("replay_format", str, "--replay-format", "auto, tailscope, mooncake or azure."),
    _field("time_scale", float, "--time-scale", "Multiply trace times (0.5 = replay twice as fast)."),
    _field("replay_prefix_tokens", int, "--replay-prefix-tokens", (
        "Mooncake replay: requests whose first block hash is equal share a prefix this long (0 = none).")),
    _field("dataset", str | None, "--dataset", (
        "Real prompts: sharegpt:PATH, jsonl:PATH, text:PATH, csv:COLUMN:PATH, parquet:PATH or arrow:PATH "
        "(docs/workload.md).")),
    _field("dataset_turns", str, "--dataset-turns", "first user turn, or all (a session)."),
    _field("dataset_sample", str, "--dataset-sample", "random (seeded) or sequential rows."),
    _field("dataset_min_input", int | None, "--dataset-min-input", "Skip prompts shorter (tokens)."),
    _field("dataset_max_input", int | None, "--dataset-max-input", "Skip prompts longer (tokens)."),
    _field("same_prompts", bool, "--same-prompts", (
        "Send the same prompt text as earlier --same-prompts runs (warm caches on purpose; default: new text every "
        "run, same lengths and times).")),
    _field("extra_body", str | None, "--extra-body", (
        'JSON fields merged into every request body, e.g. \'{"temperature": 0.7, "tools": [...]}\' or @FILE.')),
    _field("headers", list[str], "--header", "Extra request header NAME:VALUE (repeatable; not stored)."),
    _field("request_template", Path | None, "--request-template", (
        "Drive a non-OpenAI streaming API: a YAML file with path, body ({{prompt}}, …) and how to read the answer "
        "(docs/workload.md).")),
    _field("trace_context", str, "--trace-context", (
        "Send a W3C traceparent: on, off (default) or a ratio such as 0.1 (drawn from the seed); the trace id and "
        "client span id are kept per request for `tailscope trace join`.")),
    _field("telemetry_url", list[str], "--telemetry-url", (
        "A DCGM or node exporter to scrape beside the engine (repeatable), e.g. http://gpu-host:9400/metrics: GPU "
        "utilisation, memory, bandwidth, power, energy per output token in summary.gpu.")),
    _field("tracestate", str | None, "--tracestate", "A W3C tracestate sent with traceparent, e.g. 'vendor=value'."),
    _field("from_traces", str | None, "--from-traces", (
        "Trace -> load: replay the LLM calls of an ingested trace set as sessions keeping each trace's call order, "
        "parallel fan-outs and gaps (--requests = traces, default 100; --time-scale)."), metavar="SET"),
    _field("preopen_connections", int | None, "--preopen-connections", (
        "Connections opened before the first send (default: the concurrency, or ~2 s of arrivals; 0 = off).")),
    _field("warm_connections", bool, "--warm-connections", (
        "Warm each pre-opened connection with a GET /v1/models before the run.")),
    _field("stream_records", bool, "--stream-records", (
        "Keep no records in memory during the run (store only; the summary reads them back): long runs, soaks.")),
    _field("otlp_endpoint", str | None, "--otlp-endpoint", (
        "Export one client span per traced request to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (needs "
        "--trace-context): the root of each request's tree, the server's spans its children."), metavar="URL"),
    _field("otlp_protocol", str, "--otlp-protocol", "OTLP/HTTP encoding: protobuf or json."),
)}
# fmt: on


# fmt: off
#: the engine model of ``tailscope sim`` and ``tailscope serve`` (--no-prefix-caching: ``prefix_caching=False``)
ENGINE_FLAGS: dict[str, Flag] = {f.name: f for f in (
    Flag("model", str, "llama-3.1-8b", "--model", "Catalog model id or a path to a config.json."),
    Flag("gpu", str, "h100-sxm", "--gpu", "Catalog GPU id (tailscope catalog gpus)."),
    Flag("tp", int, 1, "--tp", "Tensor-parallel GPUs per replica (per attention-DP rank)."),
    Flag("engine", str, "vllm", "--engine", "Serving engine: vllm, sglang or trtllm (costs, defaults)."),
    Flag("ep", int, 1, "--ep", "Expert parallelism of an MoE model (divides tp × attention-dp)."),
    Flag("weights_dtype", str | None, None, "--weights-dtype", (
        "bf16, fp8, int8, int4, fp4, mxfp4 (default: the checkpoint's own).")),
    Flag("kv_dtype", str, "bf16", "--kv-dtype", "bf16 or fp8 KV cache."),
    Flag("max_num_seqs", int | None, None, "--max-num-seqs", "Running requests at most (vLLM default)."),
    Flag("max_num_batched_tokens", int | None, None, "--max-num-batched-tokens", (
        "Tokens per engine step at most (vLLM default).")),
    Flag(
        "gpu_memory_utilization", float, 0.9, "--gpu-memory-utilization",
        "GPU memory fraction (TensorRT-LLM: of what the weights leave).",
    ),
    Flag("no_prefix_caching", bool, False, "--no-prefix-caching", "Disable the prefix cache."),
    Flag("calibration", Path | None, None, "--calibration", (
        "Calibration file: efficiencies, or a digital twin's twin.yaml.")),
    Flag("gpu_file", Path | None, None, "--gpu-file", "YAML file with extra GPUs."),
    Flag("kv_offload_gib", float, 0.0, "--kv-offload-gib", (
        "Host memory (GiB/replica) for preempted KV: swap instead of recompute.")),
    Flag("spec_draft", int, 0, "--spec-draft", "Speculative decoding: draft tokens per step (0 = off)."),
    Flag("spec_accept", float, 0.7, "--spec-accept", "Acceptance rate of each draft token (0–1)."),
    Flag("spec_draft_model", str | None, None, "--spec-draft-model", (
        "Draft model id (default: 0.1 × the target's decode step per draft token).")),
    Flag("batch_wait_iters", int, 0, "--batch-wait-iters", (
        "Hold new prompts while decoding, up to this many steps (TensorRT-LLM's batch_wait_timeout_iters).")),
    Flag("batch_wait_ratio", float, 0.0, "--batch-wait-ratio", (
        "…or until the step's tokens reach this share of the token budget (batch_wait_max_tokens_ratio).")),
    Flag("recv_interval", int, 1, "--scheduler-recv-interval", (
        "Take new requests in every N decode steps (SGLang's --scheduler-recv-interval; 1: every step).")),
    Flag("dp_balance_iters", int | None, None, "--attention-dp-balance-iters", (
        "Attention-DP balancing: a prompt waits for every rank to have one, or N steps (TensorRT-LLM's "
        "attention_dp_config timeout_iters; 0: no balancing; default: the learned wait).")),
)}
_SIM_ONLY = {f.name: f for f in (
    Flag("attention_dp", int, 1, "--attention-dp", "Attention data-parallel ranks per replica (each with --tp GPUs)."),
    Flag("replicas", int, 1, "--replicas", "Replicas behind the router (initial count with --autoscale)."),
    Flag("router", str, "least_outstanding", "--router", "round_robin, least_outstanding or prefix_affinity."),
    Flag("autoscale", Path | None, None, "--autoscale", "Autoscaling policy YAML."),
    Flag("disagg", str | None, None, "--disagg", (
        "Prefill/decode pools: prefill=WORKERSxGPUS,decode=WORKERSxGPUS, each optionally :dpN:epN (attention-DP "
        "ranks, expert parallelism), e.g. prefill=2x4:dp4:ep4,decode=1x8:dp8:ep8 (replaces --replicas).")),
    Flag("stagger", float | None, None, "--stagger", (
        "Closed loop: start the clients over this many seconds (default: one request's lifetime; 0: all at once, "
        "as bench starts them).")),
)}
# fmt: on

#: the workload flags bench, sim and twin check share
WORKLOAD = "profile concurrency rate arrival burstiness requests duration input_tokens output_tokens warmup"


def pick(names: str, table: Mapping[str, Flag] = BENCH_FLAGS, **changed: dict[str, Any]) -> list[Flag]:
    """Some flags of ``table`` (space-separated names), in that order; ``changed`` maps a name to the attributes
    another command changes (``output_tokens={"default": "64"}``)."""
    return [table[n].but(**changed.get(n, {})) for n in names.split()]


#: ``tailscope sim``: the keyword arguments of :func:`tailscope.simulate`, in the order of its ``--help``
SIM_FLAGS: dict[str, Flag] = {f.name: f for f in pick(
    "model gpu tp engine ep attention_dp replicas router weights_dtype kv_dtype max_num_seqs max_num_batched_tokens "
    f"gpu_memory_utilization no_prefix_caching calibration gpu_file autoscale {WORKLOAD} stagger seed slo disagg "
    "spec_draft spec_accept spec_draft_model kv_offload_gib batch_wait_iters batch_wait_ratio recv_interval "
    "dp_balance_iters from_traces time_scale",
    {**BENCH_FLAGS, **ENGINE_FLAGS, **_SIM_ONLY},
    seed={"help": "Seed for lengths and arrivals (same seed → same simulation)."},
    from_traces={"help": "Simulate an ingested trace set's LLM calls as call graphs."},
)}  # fmt: skip

_E, _B = ENGINE_FLAGS, BENCH_FLAGS
_CAL = "Calibration file (e.g. a digital twin's twin.yaml)."
# fmt: off
#: ``tailscope plan kv``: the keyword arguments of :func:`tailscope.plan_kv`
PLAN_KV: dict[str, Flag] = {f.name: f for f in (
    _E["model"].but(default=...),
    Flag("context", int, ..., "--context", "Tokens per sequence (prompt + output)."),
    Flag("kv_dtype", str, "bf16", "--kv-dtype", "bf16, fp8 or int8."),
    _E["weights_dtype"],
    Flag("gpu", str | None, None, "--gpu", "GPU catalog id (for capacity and concurrency)."),
    _E["tp"], _E["gpu_memory_utilization"].but(help=None),
    Flag("engine", str, "vllm", "--engine", "vllm, sglang or trtllm: how the KV cache is sized."),
)}
#: ``tailscope plan estimate``: the keyword arguments of :func:`tailscope.plan_estimate`
PLAN_ESTIMATE: dict[str, Flag] = {f.name: f for f in (
    _E["model"].but(default=...), _E["gpu"].but(default=...),
    Flag("input_tokens", int, ..., "--input-tokens", None), Flag("output_tokens", int, ..., "--output-tokens", None),
    Flag("concurrency", int, 1, "--concurrency", "Steady requests in flight on the replica."),
    _E["tp"], _E["weights_dtype"], _E["kv_dtype"], _E["calibration"].but(help=_CAL), _E["engine"], _E["ep"],
    Flag("attention_dp", int, 1, "--attention-dp", (
        "Attention data-parallel ranks of the replica (each with --tp GPUs and its share of --concurrency).")),
)}
#: ``tailscope plan capacity``: :func:`tailscope.plan_capacity` (``steady_window`` is its ``steady_window_s``) and,
#: with ``users``, :func:`tailscope.plan_napkin`
PLAN_CAPACITY: dict[str, Flag] = {f.name: f for f in (
    Flag("model", str | None, None, "--model", None), Flag("gpu", str | None, None, "--gpu", None), _B["profile"],
    Flag("input_tokens", str, "512", "--input-tokens", "Length spec when no profile is given."),
    Flag("output_tokens", str | None, None, "--output-tokens", (
        "Length spec when no profile is given (256); napkin form: mean output tokens.")),
    Flag("target_rps", float | None, None, "--target-rps", "Requests/s the fleet must serve."),
    Flag("slo", list[str], (), "--slo", "SLO like ttft_p99=1.5s (repeatable)."),
    Flag("headroom", float, 0.2, "--headroom", "Extra load fraction to plan for."),
    Flag(
        "tp", str, "1,2,4,8", "--tp",
        "TP degrees to consider, e.g. 1,2,4; dpN: N attention-DP ranks (an MoE model tries each degree as dpN too "
        "unless some dpN is given).",
    ),
    Flag("max_replicas", int, 1024, "--max-replicas", "The most replicas of one configuration."),
    Flag("gpu_price", float | None, None, "--gpu-price", "USD per GPU-hour (ranks by cost)."),
    _E["weights_dtype"], _E["kv_dtype"], _E["calibration"].but(help=_CAL),
    Flag("sim_requests", int, 1500, "--sim-requests", (
        "The fewest requests per simulation (more when the steady window needs them).")),
    Flag("steady_window", float, 120.0, "--steady-window", (
        "Seconds of arrivals each simulation covers at least (queues reach steady state).")),
    Flag("max_sim_requests", int, 20_000, "--max-sim-requests", (
        "Most requests per simulation (beyond: one replica's share is simulated).")),
    Flag("users", int | None, None, "--users", "Napkin form: concurrent users."),
    Flag("tokens_per_user_s", float | None, None, "--tokens-per-user-s", "Napkin form."),
    Flag("gpu_tokens_s", float | None, None, "--gpu-tokens-s", "Napkin form: tokens/s one GPU gives."),
    _E["engine"],
    Flag("confidence", bool, False, "--confidence", (
        "Pass only when every SLO holds at the high end of the 90% prediction interval.")),
    Flag("disagg", str | None, None, "--disagg", (
        "Also size prefill/decode pools: auto, or prefill=1x2,decode=2x1;prefill=2x2,decode=3x1.")),
)}
#: ``tailscope plan cost``: :func:`tailscope.plan_cost` and, with ``tokens_per_day``, :func:`tailscope.plan_unit_cost`
PLAN_COST: dict[str, Flag] = {f.name: f for f in (
    Flag("gpu_price", float | None, None, "--gpu-price", "USD per GPU-hour."),
    Flag("run", str | None, None, "--run", "A stored bench or sim run (id, prefix, latest)."),
    Flag("gpus", int | None, None, "--gpus", "GPUs behind the run (sim runs know their own)."),
    Flag("api_price_in", float | None, None, "--api-price-in", "API USD per 1M input tokens."),
    Flag("api_price_out", float | None, None, "--api-price-out", "API USD per 1M output tokens."),
    Flag("daily_requests", int | None, None, "--daily-requests", None),
    Flag("ops_usd_per_month", float, 0.0, "--ops-usd-per-month", (
        "Operations cost of self-hosting (people, on-call), in the break-even.")),
    Flag("cached_share", float, 0.0, "--cached-share", "Share of API input tokens read from its cache."),
    Flag("cache_write_share", float, 0.0, "--cache-write-share", "Share of API input tokens written."),
    Flag("cache_read_mult", float, 0.1, "--cache-read-mult", "Cache reads × the input price."),
    Flag("cache_write_mult", float, 1.25, "--cache-write-mult", "Cache writes × the input price."),
    Flag("tokens_per_day", float | None, None, "--tokens-per-day", (
        "Unit cost: tokens served in a day (with --gpu-hours and/or --bill).")),
    Flag("gpu_hours", float | None, None, "--gpu-hours", "Unit cost: GPU-hours used that day."),
    Flag("bill", float | None, None, "--bill", "Unit cost: the day's bill in USD."),
)}
#: ``tailscope compare``: :func:`tailscope.compare`
COMPARE: dict[str, Flag] = {f.name: f for f in (
    Flag("metrics", str | None, None, "--metrics", (
        "Comma-separated: ttft_ms,tpot_ms,itl_ms,e2e_ms,output_tokens_per_s,error_rate,…")),
    Flag("percentiles", str, "p50,p90,p99", "--percentiles", "Statistics for latency metrics."),
    Flag("confidence", float, 0.95, "--confidence", "Confidence level of the intervals."),
    Flag("resamples", int, 2000, "--resamples", "Bootstrap resamples."),
    Flag("seed", int, 0, "--seed", "Bootstrap seed."),
    Flag("gpu_price", float | None, None, "--gpu-price", "USD per GPU-hour: show each run's $ per 1M output tokens."),
    Flag("gpus", int | None, None, "--gpus", "GPUs behind each run (sim runs know their own)."),
)}
#: ``tailscope alerts``: :func:`tailscope.alerts`
ALERTS: dict[str, Flag] = {f.name: f for f in (
    Flag("for_", str, "5m", "--for", "How long a condition must hold before an alert fires."),
    Flag("window", str, "5m", "--window", "Rate window of quantiles and ratios."),
    Flag("selector", str, "", "--selector", 'Label matchers for engine metrics, e.g. job="vllm".'),
    Flag("queue_limit", float, 0.0, "--queue-limit", "Backlog alert: the queue stayed above this all window."),
    Flag("kv_limit", float, 0.9, "--kv-limit", "KV-cache usage (0-1) that counts as near full."),
    Flag("golden", bool, False, "--golden", "Add the method's five golden alerts (alone without a contract)."),
    Flag("layer_metrics", list[str], (), "--layer-metric", (
        "LAYER=HISTOGRAM of the layer's durations in seconds (repeatable).")),
    Flag("oom_metric", str, "llm_out_of_memory_errors_total", "--oom-metric", (
        "Counter of OOM errors (golden OOM alert).")),
)}
#: ``tailscope report``: :func:`tailscope.write_report`
REPORT: dict[str, Flag] = {f.name: f for f in (
    Flag("sweep", str | None, None, "--sweep", "Compare every run of this sweep id, by load."),
    Flag("traces", list[str], None, "--traces", (
        "Trace set name (twice: diff of before and after; with one run: the run joined with the set).")),
    Flag("trace_store", Path | None, None, "--trace-db", "Store holding the set joined with a run, if not --db."),
    Flag("resamples", int, 1000, "--resamples", "Bootstrap resamples for comparison intervals."),
    Flag("seed", int, 0, "--seed", "Bootstrap seed."),
)}
#: ``tailscope plan routing``: :func:`tailscope.plan_routing`
PLAN_ROUTING: dict[str, Flag] = {f.name: f for f in (
    Flag("tiers", list[str], (), "--tier", (
        "A tier, least capable first: name=haiku,p50=800ms,p95=1.5s,in=0.8,out=4 (or run=RUN_ID).")),
    Flag("classes", list[str], (), "--class", "A request class NAME:SHARE:MIN_TIER, e.g. simple:0.8:haiku."),
    Flag("router", str | None, None, "--router", (
        "The router: name=cls,p50=60ms,p95=120ms,in=0.8,out=4,tokens_in=300,tokens_out=5.")),
    Flag("table", Path | None, None, "--table", "YAML with tiers:, classes:, router: (flags add to it)."),
    Flag("tokens_in", float, 1000.0, "--tokens-in", "Mean input tokens per request."),
    Flag("tokens_out", float, 300.0, "--tokens-out", "Mean output tokens per request."),
    Flag("shares", list[str], (), "--share", "Project this routing: TIER=SHARE (repeatable)."),
    Flag("slo_p50", str | None, None, "--slo-p50", "P50 latency SLO, e.g. 1s."),
    Flag("slo_p95", str | None, None, "--slo-p95", "P95 latency SLO, e.g. 3s."),
    Flag("seed", int, 0, "--seed", "Monte Carlo seed."),
)}
#: ``tailscope checklist``: :func:`tailscope.checklist`
CHECKLIST: dict[str, Flag] = {f.name: f for f in (
    Flag("contract", Path | None, None, "--contract", "The service's contract YAML."),
    Flag("alerts", Path | None, None, "--alerts", "The rule file `tailscope alerts --out` wrote."),
    Flag("target_rps", float | None, None, "--target-rps", (
        "Forecast requests/s the capacity must hold with 20 % headroom.")),
    Flag("attest", list[str], (), "--attest", "An item a person vouches for (repeatable)."),
)}
#: ``tailscope calibrate``: :func:`tailscope.calibrate` (``--out`` defaults to twin.yaml: a command writes a file)
CALIBRATE: dict[str, Flag] = {f.name: f for f in (
    Flag("url", str | None, None, "--url", "The server to probe (an OpenAI-compatible vLLM)."),
    Flag("model", str | None, None, "--model", "Model name (default: the first listed)."),
    Flag("out", Path, Path("twin.yaml"), "--out", "Where to write the twin."),
    Flag("from_runs", list[str], (), "--from-runs", "Fit from stored runs instead of probing."),
    Flag("budget", float, 180.0, "--budget", "Probe time limit, seconds (past it: fewer rounds, a partial twin)."),
    Flag("concurrencies", str, "1,2,4,8", "--concurrencies", "Decode probe concurrencies."),
    Flag("burst", bool, True, "--burst/--no-burst", "Finish with a burst that fills the KV cache."),
    Flag("rounds", int | None, None, "--rounds", (
        "Interleaved rounds of the prefill and decode ladders (default 8; more: steadier fit).")),
    Flag("prefill_repeats", int | None, None, "--prefill-repeats", (
        "Requests per prompt length in each round's prefill ladder (default 4).")),
    Flag("max_num_seqs", int, 256, "--max-num-seqs", "The server's --max-num-seqs."),
    Flag("max_num_batched_tokens", int, 2048, "--max-num-batched-tokens", "The server's token budget."),
    Flag("block_size", int | None, None, "--block-size", "KV block size when /metrics lacks it."),
    Flag("num_blocks", int | None, None, "--num-blocks", "KV blocks when /metrics lacks them."),
    Flag("seed", int, 0, "--seed", None),
    Flag("prior", str | None, None, "--prior", (
        "MODEL@GPU[xTP]: the trained step model of this deployment as the fit's prior (e.g. llama-3.1-8b@h100x2).")),
)}

#: ``tailscope serve``: the injected faults (:class:`~tailscope.serve.faults.FaultConfig`)
FAULT_FLAGS: dict[str, Flag] = {f.name: f for f in (
    Flag("fail_rate", float, 0.0, "--fail-rate", "Probability of answering 500 at once."),
    Flag("rate_limit_rate", float, 0.0, "--rate-limit-rate", "Probability of answering 429."),
    Flag("retry_after_s", int, 1, "--retry-after", "Retry-After seconds sent with injected 429s."),
    Flag("stall_prob", float, 0.0, "--stall-prob", "Probability that a response pauses mid-stream."),
    Flag("stall_ms", float, 2000.0, "--stall-ms", "Length of that pause in milliseconds."),
    Flag("disconnect_prob", float, 0.0, "--disconnect-prob", "Probability of cutting a stream."),
    Flag("malformed_rate", float, 0.0, "--malformed-rate", "Probability of one non-JSON data line."),
)}
#: ``tailscope proxy``: one rule per flag (:func:`tailscope.io.proxy_rules.rules_from_flags`)
PROXY_RULES: dict[str, Flag] = {f.name: f for f in (
    Flag("latency", str | None, None, "--latency", (
        "Added before forwarding: 200 (ms), uniform:100-300 or lognormal:MEDIAN,P95.")),
    Flag("latency_down", str | None, None, "--latency-down", (
        "Added before the response's first byte (same forms as --latency).")),
    Flag("error", str | None, None, "--error", "STATUS[:SHARE]: answer this status (e.g. 503:0.1)."),
    Flag("reset", str | None, None, "--reset", (
        "SHARE[:AFTER_BYTES]: close the connection (after that many response bytes).")),
    Flag("stall", str | None, None, "--stall", "MS[:AFTER_BYTES]: pause the response once, mid-stream."),
    Flag("bandwidth_kbps", float | None, None, "--bandwidth", "Throttle responses to this many kB/s."),
    Flag("blackhole", bool, False, "--blackhole", "Accept requests and never answer."),
)}
#: ``tailscope app``: :func:`tailscope.run_app` (``--no-fallback``: ``fallback=False``)
APP: dict[str, Flag] = {f.name: f for f in (
    Flag("preset", str, "knowledge-assistant", "--preset", (
        "A shipped preset (knowledge-assistant) or a preset YAML file.")),
    Flag("fixes", str, "", "--fix", "Fixes, comma-separated, or 'all' (see docs/app.md)."),
    Flag("incidents", str, "", "--incident", (
        "Incidents: pool-exhaustion, sync-audit, slow-dns, no-reuse, sse-buffering.")),
    Flag("time_scale", float, 1.0, "--time-scale", "Run every cost F times as long (0.1 = 10× faster)."),
    Flag("llm_url", str | None, None, "--llm-url", (
        "OpenAI-compatible server for the model calls (default: built-in engines).")),
    Flag("otlp_endpoint", str | None, None, "--otlp-endpoint", (
        "OTLP/HTTP collector for the spans, e.g. http://127.0.0.1:4318.")),
    Flag("seed", int, 0, "--seed", "Seed of the per-request cost draws."),
    Flag("duration", float | None, None, "--duration", "Stop after this many seconds."),
)}
#: ``tailscope twin check``: :func:`tailscope.twin_check` (and the workload: :data:`WORKLOAD`)
TWIN_CHECK: dict[str, Flag] = {f.name: f for f in (
    Flag("model", str | None, None, "--model", None),
    Flag("seed", int, 0, "--seed", None),
    Flag("tolerance", float, 0.25, "--tolerance", "Largest |error| allowed on TTFT/TPOT p50 and p90."),
    Flag("anchor", bool, False, "--anchor", (
        "Re-read the server's current speed with a small fixed run before and after the workload and scale the "
        "twin's costs to it (for machines whose speed drifts, e.g. shared VMs).")),
    Flag("repeat", int, 1, "--repeat", (
        "Measure the workload this many times and compare with the median of each percentile.")),
)}
#: ``tailscope runs list``: :func:`tailscope.list_runs`
RUNS_LIST: dict[str, Flag] = {f.name: f for f in (
    Flag("limit", int, 30, "--limit", "How many runs (newest first)."),
    Flag("kind", str | None, None, "--kind", "Only bench, sim, trace or import runs."),
    Flag("tag", str | None, None, "--tag", "Only runs with this tag (probe: calibration probes)."),
)}
#: ``tailscope runs trend``: :func:`tailscope.runs_trend`
RUNS_TREND: dict[str, Flag] = {f.name: f for f in (
    Flag("tag", str | None, None, "--tag", "Only runs with this tag (e.g. main, nightly)."),
    Flag("since", str | None, None, "--since", "Only runs since: 7d, 48h, 2w back, or a date (UTC)."),
    Flag("kind", str | None, None, "--kind", "Only bench, sim or trace runs."),
    Flag("limit", int, 1000, "--limit", "At most this many of the newest runs."),
)}
#: ``tailscope diagnose``: :func:`tailscope.diagnose`
DIAGNOSE: dict[str, Flag] = {f.name: f for f in (
    Flag("traces", str | None, None, "--traces", (
        "Trace set name, or a `trace analyze --json` file, for the critical-path rules.")),
    Flag("baseline", str | None, None, "--baseline", (
        "A run to compare with (the smaller-model-slower and cost-spike trees).")),
)}
#: ``tailscope serve``: :func:`tailscope.serve.run_server` (with the engine, the faults and ``seed``)
SERVE: dict[str, Flag] = {f.name: f for f in (
    Flag("speed", float, 1.0, "--speed", "Engine seconds per wall second (2 = twice as fast)."),
    Flag("served_model_name", str | None, None, "--served-model-name", "Name clients use (default: --model)."),
    Flag("frontend_latency", bool, True, "--frontend-latency/--no-frontend-latency", (
        "Delay requests by the API-server latency the engine model prices (as sim does).")),
    Flag("otlp_endpoint", str | None, None, "--otlp-endpoint", (
        "Export one vLLM-style llm_request span per request (gen_ai.latency.*) to this OTLP/HTTP collector, "
        "e.g. http://127.0.0.1:4318 (tailscope trace collect); honours incoming traceparent.")),
    Flag("otlp_spans", str, "phases", "--otlp-spans", (
        "phases: the llm_request span with the engine's phases as child spans (receive, queue, one per prefill "
        "chunk, decode, stream end); request: that span alone (fewer spans).")),
    Flag("reasoning_tokens", int, 0, "--reasoning-tokens", (
        "Act as a reasoning model: the first N output tokens of each chat response are reasoning_content.")),
)}
#: ``tailscope serve``'s deployment shape (:class:`~tailscope.serve.engine_factory.EngineFlags` fields sim has apart)
SERVE_POOLS: dict[str, Flag] = {f.name: f for f in (
    Flag("attention_dp", int, 1, "--attention-dp", (
        "Attention data-parallel ranks of the replica, each with --tp GPUs and its own batch (as sim's).")),
    Flag("disagg", str | None, None, "--disagg", (
        "Serve prefill/decode pools instead of one replica, as sim --disagg takes them: "
        "prefill=WORKERSxGPUS,decode=WORKERSxGPUS, each optionally :dpN:epN.")),
)}
#: ``tailscope gate``: :func:`tailscope.gate`
GATE: dict[str, Flag] = {f.name: f for f in (
    Flag("baseline", str | None, None, "--baseline", (
        "Baseline run for regression checks (default: the contract's regression.baseline).")),
    Flag("traces", str | None, None, "--traces", "Trace set (or spans JSON file) for layer checks."),
    Flag("strict", bool, False, "--strict", "Inconclusive regression checks fail the gate."),
    Flag("seed", int | None, None, "--seed", "Bootstrap seed (default: the contract's, else 0)."),
    Flag("diagnose", bool, False, "--diagnose", (
        "When the gate does not pass, add `tailscope diagnose` findings to the outputs.")),
)}
#: ``tailscope plan budget``: :func:`tailscope.plan_budget`
PLAN_BUDGET: dict[str, Flag] = {f.name: f for f in (
    Flag("target", str, ..., "--target", "End-to-end latency target, e.g. 300ms."),
    Flag("layers", list[str], (), "--layer", "LAYER=DURATION, e.g. gateway=50ms (repeatable)."),
    Flag("buffer", float | None, None, "--buffer", (
        "Fraction of the target held back (default 0.2; 0 with --buffer-per-layer).")),
    Flag("buffer_per_layer", float, 0.0, "--buffer-per-layer", (
        "Each layer keeps this buffer: it commits to budget ÷ (1 + B), e.g. 0.2.")),
    Flag("traces", str | None, None, "--from-traces", (
        "Trace set: judge each layer on what it adds to the tail traces (≥ p99) along their critical paths "
        "(budgets from those shares unless --layer is given).")),
    Flag("out", Path | None, None, "--out", "Write a performance contract (tailscope gate format)."),
)}
#: ``tailscope trace ingest``: :func:`tailscope.ingest_traces`
TRACE_INGEST: dict[str, Flag] = {f.name: f for f in (
    Flag("set_name", str, ..., "--set", "Name of the trace set to add the spans to."),
    Flag("fmt", str, "auto", "--format", "auto, otlp-json, otlp-proto, jaeger or zipkin."),
    Flag("rules", Path | None, None, "--rules", "YAML layer rules (regex on service/name/attributes)."),
    Flag("replace", bool, False, "--replace", "Empty the set first."),
)}
#: ``tailscope trace collect``: :func:`tailscope.collect_traces` (``--duration 0``: until Ctrl-C)
TRACE_COLLECT: dict[str, Flag] = {f.name: f for f in (
    Flag("port", int, 4318, "--port", "TCP port (0 picks a free one)."),
    Flag("set_name", str, "live", "--set", "Trace set the received spans go to."),
    Flag("host", str, "127.0.0.1", "--host", "Address to bind (keep 127.0.0.1 unless you mean it)."),
    Flag("token", str | None, None, "--token", "Require 'Authorization: Bearer TOKEN'."),
    Flag("max_body_mb", float, 16.0, "--max-body-mb", "Largest accepted request body (MiB)."),
    Flag("duration", float, 0.0, "--duration", "Stop after this many seconds (0 = until Ctrl-C)."),
    TRACE_INGEST["rules"],
    Flag("grpc_port", int | None, None, "--grpc-port", (
        "Also receive OTLP/gRPC on this port (4317 as collectors do; vLLM's default protocol). Needs grpcio: "
        "pip install 'tailscope[grpc]'.")),
)}
#: the critical-path options of ``tailscope trace show``, ``analyze`` and ``diff``
TRACE_PATH: dict[str, Flag] = {f.name: f for f in (
    Flag("policy", str, "default", "--policy", "Critical-path policy: default or jaeger (Jaeger UI's sections)."),
    Flag("async_blocking", bool, False, "--async-blocking", (
        "Treat follows-from and CONSUMER children as blocking their parent.")),
)}
#: ``tailscope trace whatif``: the changes and options of :func:`tailscope.whatif` (each change repeatable)
TRACE_WHATIF: dict[str, Flag] = {f.name: f for f in (
    Flag("set_duration", list[str], (), "--set-duration", '"OP=30ms": each OP span takes that long (repeatable).'),
    Flag("scale", list[str], (), "--scale", '"OP=0.6": OP spans (and their subtrees) run at that factor (repeatable).'),
    Flag("parallel", list[str], (), "--parallel", '"A,B,C": those sibling calls start together (repeatable).'),
    Flag("parallel_children", list[str], (), "--parallel-children", (
        "OP: all children of OP start together (repeatable).")),
    Flag("cache", list[str], (), "--cache", '"OP=0.4:2ms": a seeded 40 % of OP spans take 2 ms (repeatable).'),
    Flag("remove", list[str], (), "--remove", "OP: OP spans no longer run (repeatable)."),
    Flag("cap_retries", list[str], (), "--cap-retries", (
        '"OP=1": only the first N attempts of a retry run (repeatable).')),
    Flag("timeout", list[str], (), "--timeout", (
        '"OP=3s[:200ms]": OP ends at 3 s, then a fallback of 200 ms (repeatable).')),
    Flag("independent", list[str], (), "--independent", (
        '"A,B": treat these calls as independent whatever the data says.')),
    Flag("rank", bool, False, "--rank", "Rank candidate fixes from the set's findings by P95 saving."),
    Flag("root_op", str | None, None, "--root-op", 'Only traces whose root is this, e.g. "POST /chat".'),
    Flag("class_attribute", str, "tailscope.request.class", "--class-attribute", (
        "Span attribute naming a trace's class: the by-class table and --rank's per-class savings (\"\" = none).")),
    Flag("seed", int, 0, "--seed", "Seed of the --cache draws."),
)}
#: ``tailscope trace cacheability``: :func:`tailscope.cacheability`
TRACE_CACHEABILITY: dict[str, Flag] = {f.name: f for f in (
    Flag("ttl", list[str], (), "--ttl", '"OP=30d": how long OP\'s answers stay valid (repeatable).'),
    Flag("change_rate", list[str], (), "--change-rate", (
        '"OP=4/d": how often OP\'s data changes, per s, m, h or d (repeatable).')),
    Flag("window", str, "1h", "--window", "A call repeating an earlier one's arguments within this counts."),
    Flag("hit_duration", str, "1ms", "--hit-duration", "Duration of a cache hit in the what-if."),
)}
# fmt: on
