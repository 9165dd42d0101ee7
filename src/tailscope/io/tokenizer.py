"""Tokenizer files (``--tokenizer``): a ``tokenizer.json`` read through the shared reader, loaded by ``tokenizers``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tailscope.errors import ConfigError
from tailscope.files import read_user_text


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json`` (or a folder holding one).

    Raises:
        ConfigError: naming the path when it is missing, unreadable, not UTF-8 or not a tokenizer.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise ConfigError(f"--tokenizer {path}: no tokenizer.json there; pass the file or its folder")
    text = read_user_text(p, what="tokenizer")
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_str(text)
    except Exception as exc:
        raise ConfigError(f"--tokenizer {p}: cannot load it ({exc})") from None
