"""Option values coerced without building typer's pydantic validator per option (every command's, and the root's):
the plain forms here, every other value typer's own coercion, so what is accepted and every error stay typer's
(``tests/unit/cli/test_plain_coercion.py`` holds the two to the same answers). Why: docs/architecture.md, "front ends".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.core

__all__ = ["PlainCommand", "install"]

_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?")
_NONE: Any = object()  # "no plain form: ask typer"


class _PlainCoercion:
    """Stands in for typer's runtime coercion of one option: the plain forms here, the rest typer's (built lazily)."""

    __slots__ = ("_descriptor", "_typer")

    def __init__(self, descriptor: Any) -> None:
        self._descriptor = descriptor
        self._typer: Any = None

    def _own(self) -> Any:
        if self._typer is None:
            from typer._coercion import build_runtime_param  # typer's, as its parameter would have built it

            self._typer = build_runtime_param(self._descriptor)
        return self._typer

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # typer's RuntimeParam.coerce, before any adapter
            return () if param.multiple or param.nargs == -1 else None
        plain = _plain(self._descriptor, value, param, ctx)
        return self._own().coerce(value, param=param, ctx=ctx) if plain is _NONE else plain

    def __getattr__(self, name: str) -> Any:
        return getattr(self._own(), name)


def _plain(descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    """``value`` as typer would coerce it when it has a plain form here, else ``_NONE``."""
    info = descriptor.parameter_info
    if (
        getattr(info, "parser", None) is not None
        or getattr(info, "min", None) is not None
        or getattr(info, "max", None) is not None
        or descriptor.file_annotation is not None
    ):
        return _NONE
    kind = descriptor.annotation
    multi = param.multiple or param.nargs == -1
    if multi:
        if kind == list[str] and isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        return _NONE
    t = type(value)
    if kind is str:
        return value if t is str else _NONE
    if kind is int:
        if t is int:
            return value
        return int(value) if t is str and _INT.fullmatch(value) else _NONE
    if kind is float:
        if t is float:
            return value
        return float(value) if t is str and _FLOAT.fullmatch(value) else _NONE
    if kind is Path and getattr(info, "path_type", None) is None and t is str and value and "\0" not in value:
        from typer._param_types import coerce_cli_path  # the checks typer's path coercion runs after pydantic's

        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    return _NONE


def install(params: Any) -> None:
    """Put :class:`_PlainCoercion` on each of ``params`` (click parameters) whose typer coercion is not built yet."""
    for p in params:
        if getattr(p, "_runtime_param", _NONE) is None and hasattr(p, "type_descriptor"):
            p._runtime_param = _PlainCoercion(p.type_descriptor)


class PlainCommand(typer.core.TyperCommand):
    """typer's command class, with :class:`_PlainCoercion` on its options (``--help`` too) before they are parsed."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))
        return super().parse_args(ctx, args)
