"""How one reference application instance runs: where it listens, how fast its costs pass, where its calls go."""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.errors import ConfigError


@dataclass(frozen=True, slots=True)
class AppOptions:
    """The run options of a reference application (the preset says what the application is; these, how it runs).

    Built once by :func:`tailscope.start_app` and carried to the server, the pipeline and the engines.

    Attributes:
        host / port: where to listen (port 0: a free one).
        time_scale: every modelled cost runs this many times as long (0.1: ten times faster); the built-in engines
            run 1/F times faster. Must be > 0.
        llm_url: an OpenAI-compatible server to call instead of the built-in engines.
        otlp_endpoint: OTLP/HTTP collector for the spans (None: no spans).
        seed: seed of the per-request draws and the engines.
        fallback: answer from the FAQ or a static text when the model fails (else the request fails with 502).

    Raises:
        ConfigError: ``time_scale`` not > 0.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    time_scale: float = 1.0
    llm_url: str | None = None
    otlp_endpoint: str | None = None
    seed: int = 0
    fallback: bool = True

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ConfigError(f"--time-scale must be > 0 (got {self.time_scale!r}); 1 = the preset's real costs")
