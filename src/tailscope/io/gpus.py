"""User GPU files (``--gpu-file``): YAML validated by pydantic, turned into :class:`~tailscope.engine.gpus.GpuSpec`.

The format is in :mod:`tailscope.engine.gpus` and docs/engine.md. Unknown keys are errors; every error names the
file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailscope.engine.gpus import GpuSpec
from tailscope.errors import CatalogError
from tailscope.files import read_user_text
from tailscope.io._yaml import first_error, parse_yaml


class _GpuM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    name: str | None = None
    memory_gb: float | None = Field(default=None, gt=0)
    memory_gib: float | None = Field(default=None, gt=0)
    hbm_gbps: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    fp4_tflops: float | None = Field(default=None, gt=0)
    interconnect_gbps: float = Field(default=32.0, gt=0)
    nvlink_domain: int = Field(default=8, ge=1)
    scaleout_gbps: float = Field(default=50.0, gt=0)
    source: str | None = None

    @model_validator(mode="after")
    def _one_memory(self) -> _GpuM:
        if (self.memory_gb is None) == (self.memory_gib is None):
            raise ValueError("needs exactly one of memory_gb (decimal GB) or memory_gib (binary GiB)")
        return self


class _GpuFileM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: list[_GpuM]


def parse_gpu_file(text: str, *, source: str) -> tuple[GpuSpec, ...]:
    """Validate GPU YAML text (a top-level ``gpus:`` list).

    Raises:
        CatalogError: ``source:line: gpus[i].field message``.
    """
    data, root = parse_yaml(text, source=source, error=CatalogError)
    if not isinstance(data, dict) or "gpus" not in data:
        raise CatalogError(f"{source}:1: expected a top-level 'gpus:' list (see docs/engine.md)")
    try:
        m = _GpuFileM.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(first_error(exc, root, source)) from None
    out: list[GpuSpec] = []
    for g in m.gpus:
        gid = g.id.lower()
        binary = g.memory_gib is not None
        out.append(
            GpuSpec(
                id=gid,
                name=g.name or gid,
                memory_gb=float(g.memory_gib if binary else g.memory_gb),  # type: ignore[arg-type]
                hbm_gbps=g.hbm_gbps,
                bf16_tflops=g.bf16_tflops,
                fp8_tflops=g.fp8_tflops,
                interconnect_gbps=g.interconnect_gbps,
                source=g.source or source,
                memory_binary=binary,
                fp4_tflops=g.fp4_tflops,
                nvlink_domain=g.nvlink_domain,
                scaleout_gbps=g.scaleout_gbps,
            )
        )
    return tuple(out)


def load_gpu_file(path: str | Path) -> tuple[GpuSpec, ...]:
    """Read extra GPUs from a YAML file with a top-level ``gpus:`` list.

    Raises:
        CatalogError: naming the file, the line and the field.
    """
    p = Path(path)
    if not p.exists():
        raise CatalogError(f"{p}: GPU file not found")
    return parse_gpu_file(read_user_text(p, what="GPU file", error=CatalogError), source=str(p))
