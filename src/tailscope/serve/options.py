"""Settings of one built-in server, resolved once at the CLI or embedding edge and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailscope.errors import ConfigError
from tailscope.serve.faults import FaultConfig
from tailscope.serve.metrics import CacheInfo
from tailscope.serve.tokenizer import DEFAULT_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What the HTTP layer needs to know about the served model and how to behave.

    Attributes:
        model_name: the served model name (``/v1/models``, ``model`` fields, the ``model_name`` metric label).
        max_model_len: context length in tokens (prompt + output); longer requests get a 400.
        block_size: KV block size in tokens (prefix-cache block hashes are computed over blocks of this size).
        speed: engine seconds per wall second (``2.0`` serves twice as fast as the modelled hardware).
        natural_tokens: (min, max) output length when the client does not set ``ignore_eos``: the simulated model
            "emits EOS" after a length drawn deterministically from the prompt in this range.
        faults: fault injection settings.
        seed: seed of response ids and natural output lengths.
        cache: labels of ``vllm:cache_config_info``.
        description: one line naming the model and hardware, shown by ``serve`` and ``bench``.
        frontend_latency: delay each request by the API-server latency the engine model prices (as ``sim`` does)
            before the engine sees it; ``False`` submits at once.
        otlp_endpoint: export one vLLM-style ``llm_request`` span per request to this OTLP/HTTP collector
            (``http://HOST:4318``), honouring incoming W3C ``traceparent``; ``None`` (default) exports nothing.
        otlp_spans: ``phases`` (default): the ``llm_request`` span with the engine's phases as child spans (receive,
            queue, one per prefill chunk, decode, stream end); ``request``: that span alone (one span per request
            instead of five plus one per prefill chunk).
        service_name: the ``service.name`` of those spans.
        reasoning_tokens: act as a reasoning model: the first N output tokens of each chat response are sent as
            ``delta.reasoning_content`` (and counted in ``usage.completion_tokens_details.reasoning_tokens``); 0 = none.
        prompt_scale / prompt_offset: a digital twin's server counts a prompt of N of our tokens as
            ``offset + scale × N`` (its tokenizer and chat template); the engine, the length check and ``usage`` see
            that count, as ``sim --calibration twin.yaml`` does (1 and 0 without a twin).
    """

    model_name: str
    max_model_len: int = 131_072
    block_size: int = DEFAULT_BLOCK_SIZE
    speed: float = 1.0
    natural_tokens: tuple[int, int] = (64, 512)
    faults: FaultConfig = field(default_factory=FaultConfig)
    seed: int = 0
    cache: CacheInfo = field(default_factory=CacheInfo)
    description: str = ""
    frontend_latency: bool = True
    otlp_endpoint: str | None = None
    otlp_spans: str = "phases"
    service_name: str = "tailscope-serve"
    reasoning_tokens: int = 0
    prompt_scale: float = 1.0
    prompt_offset: float = 0.0

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the setting that is out of range."""
        if not self.model_name:
            raise ConfigError("--served-model-name must not be empty")
        if not 0 <= self.reasoning_tokens <= 1_000_000:
            raise ConfigError(f"--reasoning-tokens must be 0 to 1,000,000 (got {self.reasoning_tokens})")
        if self.max_model_len < 2:
            raise ConfigError(f"--max-model-len must be ≥ 2 tokens (got {self.max_model_len})")
        if self.block_size < 1:
            raise ConfigError(f"block size must be ≥ 1 token (got {self.block_size})")
        if not self.speed > 0:
            raise ConfigError(f"--speed must be > 0 (got {self.speed!r}); 1.0 = real time")
        lo, hi = self.natural_tokens
        if not 1 <= lo <= hi:
            raise ConfigError(f"natural output length range must satisfy 1 ≤ min ≤ max (got {lo}..{hi})")
        self.faults.validate()
        if self.otlp_spans not in ("request", "phases"):
            raise ConfigError(f"--otlp-spans {self.otlp_spans!r}: use request (one span per request) or phases")
        if self.otlp_endpoint is not None:
            from tailscope.client.otlp import traces_url

            traces_url(self.otlp_endpoint)
