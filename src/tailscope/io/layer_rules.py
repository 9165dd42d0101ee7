"""Layer rules from a YAML or JSON file (``trace ingest --rules``): read by the shared reader, parsed by the core."""

from __future__ import annotations

import os
from typing import Any

import yaml

from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.trace.layers import LayerRule, parse_layer_rules


def load_layer_rules(path: str | os.PathLike[str] | None) -> tuple[LayerRule, ...]:
    """The rules of ``path`` (none when ``path`` is None).

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 or YAML, or a rule is invalid (naming the file).
    """
    if path is None:
        return ()
    text = read_user_text(path, what="layer rules")
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"--rules {path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_layer_rules(data, source=str(path))
