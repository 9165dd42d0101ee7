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
        default: the value when the flag is not given (a tuple for a repeatable flag).
        decls: the flag's spellings, space-separated: ``"--requests -n --num-prompts"``; ``"--a/--no-a"`` for an
            on/off pair.
        help: the one-line help.
        metavar: the value's name in the help, when not the type's.
    """

    name: str
    type: Any
    default: Any
    decls: str
    help: str
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
    _field("replay", Path | None, "--replay", (
        "Replay a trace (JSONL timestamp_s/input_tokens/output_tokens, Mooncake or Azure CSV).")),
    _field("replay_format", str, "--replay-format", "auto, tailscope, mooncake or azure."),
    _field("time_scale", float, "--time-scale", "Multiply trace times (0.5 = replay twice as fast)."),
    _field("dataset", str | None, "--dataset", (
        "Real prompts: sharegpt:PATH, jsonl:PATH, text:PATH, csv:COLUMN:PATH or parquet:PATH (docs/workload.md).")),
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
    Flag("gpu_memory_utilization", float, 0.9, "--gpu-memory-utilization", "GPU memory fraction."),
    Flag("no_prefix_caching", bool, False, "--no-prefix-caching", "Disable the prefix cache."),
    Flag("calibration", Path | None, None, "--calibration", (
        "Calibration file: efficiencies, or a digital twin's twin.yaml.")),
    Flag("gpu_file", Path | None, None, "--gpu-file", "YAML file with extra GPUs."),
)}
_SIM_ONLY = {f.name: f for f in (
    Flag("attention_dp", int, 1, "--attention-dp", "Attention data-parallel ranks per replica (each with --tp GPUs)."),
    Flag("replicas", int, 1, "--replicas", "Replicas behind the router (initial count with --autoscale)."),
    Flag("router", str, "least_outstanding", "--router", "round_robin, least_outstanding or prefix_affinity."),
    Flag("autoscale", Path | None, None, "--autoscale", "Autoscaling policy YAML."),
    Flag("disagg", str | None, None, "--disagg", (
        "Prefill/decode pools: prefill=WORKERSxTP,decode=WORKERSxTP (replaces --replicas/--tp).")),
    Flag("spec_draft", int, 0, "--spec-draft", "Speculative decoding: draft tokens per step (0 = off)."),
    Flag("spec_accept", float, 0.7, "--spec-accept", "Acceptance rate of each draft token (0–1)."),
    Flag("spec_draft_model", str | None, None, "--spec-draft-model", (
        "Draft model id (default: 0.1 × the target's decode step per draft token).")),
    Flag("kv_offload_gib", float, 0.0, "--kv-offload-gib", (
        "Host memory (GiB/replica) for preempted KV: swap instead of recompute.")),
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
    f"gpu_memory_utilization no_prefix_caching calibration gpu_file autoscale {WORKLOAD} seed slo disagg spec_draft "
    "spec_accept spec_draft_model kv_offload_gib from_traces time_scale",
    {**BENCH_FLAGS, **ENGINE_FLAGS, **_SIM_ONLY},
    seed={"help": "Seed for lengths and arrivals (same seed → same simulation)."},
    from_traces={"help": "Simulate an ingested trace set's LLM calls as call graphs."},
)}  # fmt: skip
