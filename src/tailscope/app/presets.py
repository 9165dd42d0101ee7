"""Where presets live: package data under ``tailscope/app/presets/`` (``--preset NAME``) or any YAML file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tailscope.errors import ConfigError
from tailscope.io.app_preset import load_app_preset
from tailscope.workload.app_preset import AppPreset, apply_fixes, apply_incidents

PRESETS_DIR = Path(__file__).parent / "presets"


def preset_names() -> list[str]:
    """The presets shipped with the package."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def resolve_preset(
    preset: str | Path = "knowledge-assistant",
    *,
    fixes: str | Sequence[str] = (),
    incidents: str | Sequence[str] = (),
) -> AppPreset:
    """The preset named ``preset`` (or read from that file), with ``fixes`` and then ``incidents`` applied.

    Raises:
        ConfigError: an unknown preset name, a bad file (``file:line: field …``), an unknown fix or incident.
    """
    path = Path(preset)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = PRESETS_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"--preset {preset!r}: no such preset; use one of {', '.join(preset_names())} or a YAML file"
            )
    return apply_incidents(apply_fixes(load_app_preset(path), fixes), incidents)
