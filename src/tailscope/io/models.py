"""Model architectures from files: a Hugging Face ``config.json`` (``--model path/config.json``).

The JSON is read here; the keys are interpreted by the pure :func:`tailscope.engine.models.arch_from_hf_config`.
"""

from __future__ import annotations

import json
from pathlib import Path

from tailscope.engine.model_catalog import find_model_entry
from tailscope.engine.models import ModelArch, arch_from_hf_config
from tailscope.errors import CatalogError
from tailscope.files import read_user_text


def load_hf_config(path: str | Path) -> ModelArch:
    """Load a ``config.json`` file (or a directory holding one).

    Raises:
        CatalogError: when the file is missing or not a JSON object (names the file and, for JSON errors, the line).
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise CatalogError(f"{p}: no such config.json; pass a catalog id or a Hugging Face config.json")
    text = read_user_text(p, what="config.json", error=CatalogError)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(cfg, dict):
        raise CatalogError(f"{p}:1: expected a JSON object")
    return arch_from_hf_config(cfg, name=str(path), source=str(p))


def resolve_model(ref: str) -> ModelArch:
    """A catalog id or alias (``llama-3.1-8b``, ``meta-llama/Llama-3.1-8B``) or a path to a ``config.json``.

    Catalog ids and aliases win; anything else that looks like a path is read as a ``config.json``.

    Raises:
        CatalogError: an unknown id (listing the catalog) or an unreadable file.
    """
    entry = find_model_entry(ref)
    if entry is not None:
        return entry.arch()
    if ref.endswith(".json") or Path(ref).exists():
        return load_hf_config(ref)
    from tailscope.engine.model_catalog import get_model_entry

    return get_model_entry(ref).arch()  # raises, listing the catalog
