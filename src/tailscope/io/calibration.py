"""Calibration files (``--calibration``): roofline efficiency overrides or a digital twin (``twin.yaml``).

The YAML is read here; the content is validated by the pure
:func:`tailscope.engine.calibration.calibration_from_mapping` and :func:`tailscope.engine.twin.twin_from_mapping`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tailscope.engine.calibration import BUILTIN, Calibration, calibration_from_mapping
from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._yaml import parse_yaml


def load_calibration(path: str | Path | None) -> Calibration:
    """Read a calibration YAML file; ``None`` gives the built-in defaults (the trained step model).

    Raises:
        ConfigError: naming the file (and the line for YAML errors) and the section or field.
    """
    if path is None:
        return BUILTIN
    p = Path(path)
    text = read_user_text(p, what="calibration file")
    data, _ = parse_yaml(text, source=str(p), error=ConfigError)
    if isinstance(data, dict) and "coefficients_us" in data:
        from tailscope.engine.twin import twin_from_mapping

        return replace(BUILTIN, source=str(p), twin=twin_from_mapping(data, source=str(p)))
    return calibration_from_mapping(data, source=str(p))
