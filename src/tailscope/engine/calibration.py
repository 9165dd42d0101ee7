"""Efficiency coefficients of the step-time model and the calibration file that overrides them.

The defaults below were chosen against the published measurements in ``shared/calibration/published_points.csv``
(vLLM 0.12, Qwen3-32B on 4× H100 SXM) and nothing else; ``benchmarks/sim_accuracy.py`` reports the error on each
point. They are fractions of the datasheet peaks, so they carry over to other GPUs as a first guess; a calibration
file refines them per GPU, per model or per (model, GPU) pair::

    # calibration.yaml — every key optional; later, more specific sections win
    default:            {mfu: 0.55, mbu: 0.80}
    gpus:
      h100-sxm:         {step_overhead_ms: 2.5}
    models:
      llama-3.1-8b:     {mfu: 0.6}
    pairs:
      llama-3.1-8b@h100-sxm: {mbu: 0.85}

The loader is generic (a mapping of field → number per section) so that a fitting tool can write the same file;
reading the YAML is :func:`tailscope.io.calibration.load_calibration`'s job. Without a file the trained step model
(:mod:`tailscope.engine.step_model`) is used; a file of roofline efficiencies selects the plain roofline
(:class:`~tailscope.engine.perf.StepTimeModel`) with them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from tailscope.errors import ConfigError

if TYPE_CHECKING:
    from tailscope.engine.twin import TwinModel


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How close the serving stack gets to the hardware peaks, plus its fixed costs.

    Attributes:
        mfu: achieved fraction of dense tensor FLOP/s in compute-bound work (prefill).
        mbu: achieved fraction of HBM bandwidth in memory-bound work (decode: weights + KV reads).
        step_overhead_ms: fixed cost of one engine step (scheduler, input prep, CUDA-graph launch, sampling), ms.
        per_seq_overhead_us: extra step cost per scheduled sequence (bookkeeping, sampling, output processing), µs.
        allreduce_latency_us: fixed latency of one tensor-parallel all-reduce (two per layer), µs.
        allreduce_efficiency: achieved fraction of the interconnect bandwidth during all-reduce.
        frontend_ms: latency between the client and the engine that requests do not queue for (HTTP, chat
            template, request setup in the API server, the measuring client's own overhead), ms. It delays the
            request's arrival at the engine, so it adds to TTFT and E2E.
        frontend_per_token_us: tokenization cost per prompt token; the API server tokenizes one request at a
            time, so bursts of long prompts queue here, µs.
        frontend_per_inflight_us: extra arrival delay per request already in flight on that replica (the API
            server's event loop — and the measuring client's — also stream every running request), µs.
    """

    mfu: float = 0.50
    mbu: float = 0.80
    step_overhead_ms: float = 1.5
    per_seq_overhead_us: float = 50.0
    allreduce_latency_us: float = 18.0
    allreduce_efficiency: float = 0.7
    frontend_ms: float = 45.0
    frontend_per_token_us: float = 1.0
    frontend_per_inflight_us: float = 1500.0

    def validate(self, where: str = "efficiency") -> Efficiency:
        """Check ranges. Raises ConfigError naming ``where`` and the field."""
        for name in ("mfu", "mbu", "allreduce_efficiency"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ConfigError(f"{where}: {name} must be in (0, 1] (got {v!r})")
        for f in fields(self):
            v = getattr(self, f.name)
            if v < 0:
                raise ConfigError(f"{where}: {f.name} must be ≥ 0 (got {v!r})")
        return self


#: Defaults per GPU where they differ from :class:`Efficiency` (empty: one set of fractions for all GPUs).
DEFAULT_BY_GPU: dict[str, dict[str, float]] = {}

_FIELDS = {f.name for f in fields(Efficiency)}
_SECTIONS = ("default", "gpus", "models", "pairs")


def _apply(base: Efficiency, overrides: dict[str, Any], where: str) -> Efficiency:
    unknown = {str(k) for k in overrides} - _FIELDS  # YAML keys can be numbers or null
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_FIELDS))}"
        )
    try:
        values = {k: float(v) for k, v in overrides.items()}
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: every value must be a number") from None
    return replace(base, **values).validate(where)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Layers of overrides: built-in defaults < file ``default`` < ``gpus`` < ``models`` < ``pairs``."""

    default: dict[str, float]
    gpus: dict[str, dict[str, float]]
    models: dict[str, dict[str, float]]
    pairs: dict[str, dict[str, float]]
    source: str = "built-in defaults"
    twin: TwinModel | None = None  # a digital twin fitted on a real server replaces the roofline entirely

    @property
    def has_overrides(self) -> bool:
        """Whether any section sets roofline efficiencies (then the plain roofline model is used)."""
        return bool(self.default or self.gpus or self.models or self.pairs)

    def efficiency(self, gpu_id: str, model_id: str = "") -> Efficiency:
        """The coefficients for ``model_id`` on ``gpu_id``."""
        eff = _apply(Efficiency(), DEFAULT_BY_GPU.get(gpu_id, {}), "built-in defaults")
        eff = _apply(eff, self.default, f"{self.source}: default")
        eff = _apply(eff, self.gpus.get(gpu_id, {}), f"{self.source}: gpus.{gpu_id}")
        eff = _apply(eff, self.models.get(model_id, {}), f"{self.source}: models.{model_id}")
        return _apply(eff, self.pairs.get(f"{model_id}@{gpu_id}", {}), f"{self.source}: pairs.{model_id}@{gpu_id}")


BUILTIN = Calibration(default={}, gpus={}, models={}, pairs={})


def calibration_from_mapping(data: Any, *, source: str) -> Calibration:
    """Validate a parsed calibration mapping (see the module docstring for its shape).

    Raises:
        ConfigError: naming ``source`` and the offending section or field.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a calibration file is a mapping with sections {', '.join(_SECTIONS)}")
    extra = {str(k) for k in data} - set(_SECTIONS)
    if extra:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(sorted(extra))}; use {', '.join(_SECTIONS)}")
    default = data.get("default") or {}
    if not isinstance(default, dict):
        raise ConfigError(f"{source}: 'default' must be a mapping of field: number")
    nested: dict[str, dict[str, dict[str, float]]] = {}
    for sec in ("gpus", "models", "pairs"):
        raw = data.get(sec) or {}
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ConfigError(f"{source}: '{sec}' must map names to mappings of field: number")
        nested[sec] = {str(k).lower(): dict(v) for k, v in raw.items()}
    cal = Calibration(dict(default), nested["gpus"], nested["models"], nested["pairs"], source=source)
    # validate every section now so a typo fails at load time, not mid-run
    _apply(Efficiency(), cal.default, f"{source}: default")
    for sec, table in nested.items():
        for name, ov in table.items():
            _apply(Efficiency(), ov, f"{source}: {sec}.{name}")
    return cal
