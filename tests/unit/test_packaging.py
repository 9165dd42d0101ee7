"""The installed package says it is typed (PEP 561), and the wheel's build config ships that marker."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import tailscope

ROOT = Path(__file__).resolve().parents[2]
MARKER = "src/tailscope/py.typed"


def test_package_has_py_typed_marker() -> None:
    marker = Path(tailscope.__file__).parent / "py.typed"
    assert marker.is_file(), f"{marker} is missing: type checkers would treat tailscope as untyped"
    assert marker.read_text().strip() == "", "py.typed is an empty marker ('partial' would mean partial stubs)"


def test_wheel_config_ships_the_marker() -> None:
    """Hatchling's wheel target takes every file under the listed package folders (package data included) unless an
    ``exclude`` pattern or an ``only-include`` list leaves it out."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    wheel = build["targets"]["wheel"]
    assert "src/tailscope" in wheel.get("packages", []), f"the wheel packages {wheel.get('packages')}"
    for where in (build, wheel):
        excluded = [p for p in where.get("exclude", []) if fnmatch(MARKER, p) or fnmatch("py.typed", p.lstrip("/"))]
        assert not excluded, f"[tool.hatch.build] exclude {excluded} leaves py.typed out of the wheel"
        only = where.get("only-include")
        assert only is None or any(MARKER.startswith(p.rstrip("/")) for p in only), f"only-include {only} skips it"
