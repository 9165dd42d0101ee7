"""Scheduler settings a server was launched with, beyond its deployment and the engine's defaults.

A benchmark's launch script can give the engine settings that change what it measured: TensorRT-LLM's batch waiting
(``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``), token budget (``--max_num_tokens``) and attention-DP
balancing (``attention_dp_config``), or a cap on the requests it runs at once (SGLang's ``--max-running-requests``,
vLLM's ``--max-num-seqs``). The calibration corpus reads them from its runs' public launch scripts
(``io/corpus_recipes.py``); the fit prices them, and a row's ``sim`` flags and :func:`tailscope.simulate` keywords
carry them, all from this one value.
"""

from __future__ import annotations

from dataclasses import dataclass

#: each setting: its attribute, the ``sim``/``serve`` flag and the :func:`tailscope.simulate` keyword that set it
_SETTINGS = (
    ("batch_wait_iters", "--batch-wait-iters", "batch_wait_iters"),
    ("batch_wait_ratio", "--batch-wait-ratio", "batch_wait_ratio"),
    ("max_num_tokens", "--max-num-batched-tokens", "max_num_batched_tokens"),
    ("max_running", "--max-num-seqs", "max_num_seqs"),
    ("dp_balance_iters", "--attention-dp-balance-iters", "dp_balance_iters"),
)


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """What a launch script set (the defaults, :data:`NOT_SET`: nothing, the engine's own settings stand).

    Attributes:
        batch_wait_iters, batch_wait_ratio: batch waiting (``EngineConfig.batch_wait_iters`` / ``batch_wait_ratio``):
            while requests decode, new prompts wait up to this many steps, or until the step's tokens reach this
            share of the token budget.
        max_num_tokens: the token budget per step (0: the engine profile's default for the GPU).
        max_running: the requests the server runs at once (0: its KV cache decides).
        dp_balance_iters: TensorRT-LLM's attention-DP balancing (``attention_dp_config``: ``enable_balance`` with
            ``timeout_iters``): a context request waits for every rank to have one, or this many iterations; 0: the
            script does not balance; None: not known (the engine's learned wait applies).
    """

    batch_wait_iters: int = 0
    batch_wait_ratio: float = 0.0
    max_num_tokens: int = 0
    max_running: int = 0
    dp_balance_iters: int | None = None

    @classmethod
    def parse(cls, fields: dict[str, str]) -> LaunchSettings:
        """From text fields named as the attributes (empty or missing: not set)."""
        return cls(
            int(fields.get("batch_wait_iters") or 0),
            float(fields.get("batch_wait_ratio") or 0.0),
            int(fields.get("max_num_tokens") or 0),
            int(fields.get("max_running") or 0),
            int(fields["dp_balance_iters"]) if fields.get("dp_balance_iters") else None,
        )

    def _set(self) -> list[tuple[str, str, int | float]]:
        """What was set: every setting away from its default (a balancing of 0 says "none"; None is not known)."""
        return [(flag, kw, v) for attr, flag, kw in _SETTINGS if (v := getattr(self, attr)) != getattr(NOT_SET, attr)]

    def sim_flags(self) -> list[str]:
        """The ``tailscope sim`` / ``serve`` flags that set what was set."""
        return [s for flag, _, v in self._set() for s in (flag, f"{v:g}" if isinstance(v, float) else str(v))]

    def simulate_options(self) -> dict[str, int | float]:
        """The :func:`tailscope.simulate` keywords that set what was set."""
        return {kw: v for _, kw, v in self._set()}


#: nothing set: the engine's defaults stand
NOT_SET = LaunchSettings()
