"""``/metrics`` of the built-in server in Prometheus text format, with vLLM's names, labels and buckets.

Names, help texts, label sets (``model_name``, ``engine``) and histogram bucket boundaries follow vLLM v1
(``vllm/v1/metrics/loggers.py``), so dashboards, alert rules and tailscope's own scraper work unchanged against the
built-in engine. Gauges and token/preemption/prefix-cache counters come from the engine's :class:`EngineStats`;
request histograms are observed by the server on the wall clock when tokens are released to clients.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tailscope.engine.api import EngineStats

#: vLLM's TTFT buckets (seconds).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
#: vLLM's inter-token latency / time-per-output-token buckets (seconds).
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
#: vLLM's request-latency buckets (seconds): e2e, queue, inference, prefill, decode.
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip
#: vLLM's tokens-per-step buckets.
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip

#: vLLM's finish reasons, each pre-registered at 0.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort")


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, … up to ``max_value`` inclusive (vLLM's token-count buckets)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


def format_value(value: float) -> str:
    """A number as Prometheus' Python client writes it (``1.0``, ``0.001``, ``+Inf``, ``NaN``)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


@dataclass(slots=True)
class Histogram:
    """A cumulative Prometheus histogram with fixed upper bounds.

    Attributes:
        bounds: finite upper bounds, ascending (``+Inf`` is implied).
        counts: observations per bucket (non-cumulative; last = above every bound).
        total: sum of all observations.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is ≥ it (Prometheus ``le`` semantics)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        """Number of observations."""
        return sum(self.counts)

    def render(self, name: str, labels: Sequence[tuple[str, str]], out: list[str]) -> None:
        """Append the ``_bucket``/``_count``/``_sum`` sample lines of this histogram to ``out``."""
        cumulative = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += n
            out.append(f"{name}_bucket{_labels((*labels, ('le', format_value(bound))))} {format_value(cumulative)}")
        out.append(f"{name}_count{_labels(labels)} {format_value(cumulative)}")
        out.append(f"{name}_sum{_labels(labels)} {format_value(self.total)}")


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """Labels of ``vllm:cache_config_info`` (vLLM writes every CacheConfig field as a string label)."""

    block_size: int = 16
    num_gpu_blocks: int = 0
    gpu_memory_utilization: float = 0.9
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True


class ServeMetrics:
    """Request-level histograms and counters of one served model, rendered together with engine stats.

    Args:
        model_name: value of the ``model_name`` label (the served model name).
        max_model_len: bounds the 1-2-5 token-count buckets, as in vLLM.
        cache: labels of ``vllm:cache_config_info``.
    """

    def __init__(self, model_name: str, *, max_model_len: int, cache: CacheInfo | None = None) -> None:
        self.model_name = model_name
        self.cache = cache or CacheInfo()
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.tpot = Histogram(ITL_BUCKETS)  # per request: (last token − first token) / (tokens − 1)
        self.prompt_tokens = Histogram(token_buckets)
        self.generation_tokens = Histogram(token_buckets)
        self.max_tokens_param = Histogram(token_buckets)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)
        self.loop_lag_max_s = 0.0
        self.loop_late_steps = 0

    def observe_finished(
        self,
        *,
        reason: str,
        e2e_s: float,
        prompt_tokens: int,
        generation_tokens: int,
        max_tokens: int | None,
        decode_s: float | None = None,
    ) -> None:
        """Record one finished request (``reason`` in :data:`FINISH_REASONS`); ``decode_s`` is the time from its
        first to its last token (for vLLM's per-request TPOT histogram)."""
        self.success[reason] = self.success.get(reason, 0) + 1
        self.e2e.observe(e2e_s)
        if decode_s is not None and generation_tokens > 1:
            self.tpot.observe(decode_s / (generation_tokens - 1))
        self.prompt_tokens.observe(prompt_tokens)
        self.generation_tokens.observe(generation_tokens)
        if max_tokens:
            self.max_tokens_param.observe(max_tokens)

    def render(self, stats: EngineStats) -> str:
        """The whole exposition text (ends with a newline)."""
        base = (("model_name", self.model_name), ("engine", "0"))
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        def sample(name: str, value: float, labels: Sequence[tuple[str, str]] = base) -> None:
            out.append(f"{name}{_labels(labels)} {format_value(value)}")

        head("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
        sample("vllm:num_requests_running", stats.running)
        head("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
        sample("vllm:num_requests_waiting", stats.waiting)
        head("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
        sample("vllm:kv_cache_usage_perc", stats.kv_usage)
        counters = (
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
             stats.prefix_queries_tokens),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
             stats.prefix_hits_tokens),
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", stats.preemptions),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens_total),
        )  # fmt: skip
        for name, text, value in counters:
            head(f"{name}_total", "counter", text)
            sample(f"{name}_total", value)
        head("vllm:request_success_total", "counter", "Count of successfully processed requests.")
        for reason, n in self.success.items():
            sample("vllm:request_success_total", n, (*base, ("finished_reason", reason)))
        histograms = (
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", self.generation_tokens),
            ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", self.iteration_tokens),
            ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
             self.max_tokens_param),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl),
            ("vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request.", self.tpot),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
        )  # fmt: skip
        for name, text, hist in histograms:
            head(name, "histogram", text)
            hist.render(name, base, out)
        c = self.cache
        head("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
        info = (
            ("block_size", str(c.block_size)),
            ("cache_dtype", c.cache_dtype),
            ("enable_prefix_caching", str(c.enable_prefix_caching)),
            ("engine", "0"),
            ("gpu_memory_utilization", str(c.gpu_memory_utilization)),
            ("num_gpu_blocks", str(c.num_gpu_blocks or stats.kv_blocks_total)),
        )
        sample("vllm:cache_config_info", 1.0, info)
        head("tailscope:engine_loop_lag_max_seconds", "gauge",
             "Largest lag of the serve engine loop behind the engine model's step schedule.")  # fmt: skip
        sample("tailscope:engine_loop_lag_max_seconds", self.loop_lag_max_s)
        head("tailscope:engine_loop_late_steps_total", "counter",
             "Steps released more than 5 ms after their scheduled end.")  # fmt: skip
        sample("tailscope:engine_loop_late_steps_total", self.loop_late_steps)
        return "\n".join(out) + "\n"
