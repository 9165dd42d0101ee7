"""The catalogs the engine model uses, as ``tailscope catalog`` lists them: :func:`catalog_models`,
:func:`catalog_gpus`."""

from __future__ import annotations

import os
from pathlib import Path

from tailscope.api._support import public
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.model_catalog import ModelEntry


@public
def catalog_models() -> tuple[ModelEntry, ...]:
    """The built-in model catalog (``config.json`` values with their sources), in catalog order."""
    from tailscope.engine.model_catalog import MODELS

    return MODELS


@public
def catalog_gpus(*, gpu_file: str | os.PathLike[str] | None = None) -> tuple[GpuSpec, ...]:
    """The built-in GPU catalog, then the GPUs of ``gpu_file`` (a YAML file with a top-level ``gpus:`` list).

    Raises:
        CatalogError: ``gpu_file`` cannot be read or is invalid (naming the file, the line and the field).
    """
    from tailscope.engine.gpus import GPUS
    from tailscope.io.gpus import load_gpu_file

    return (*GPUS, *(load_gpu_file(Path(gpu_file)) if gpu_file is not None else ()))
