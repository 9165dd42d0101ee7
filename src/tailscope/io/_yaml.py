"""YAML at the boundary: parse text once into data and a node tree, and find the line of a field path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tailscope.errors import TailscopeError
from tailscope.io._schema import describe, first_problem

M = TypeVar("M", bound=BaseModel)
#: a validation error's location (for its line) and what is wrong, from the error and the model that raised it
Problem = Callable[[ValidationError, type[BaseModel]], tuple[tuple[int | str, ...], str]]


def parse_yaml(text: str, *, source: str, error: type[TailscopeError]) -> tuple[Any, yaml.Node | None]:
    """``(data, node tree)`` of YAML ``text``.

    Raises:
        error: ``source:line: not valid YAML (problem)``.
    """
    try:
        return yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{source}:{line}: not valid YAML ({problem})") from None


def parse_yaml_mapping(
    text: str, *, source: str, error: type[TailscopeError], shape: str
) -> tuple[dict[str, Any], yaml.Node | None]:
    """:func:`parse_yaml` for a file whose top level must be a mapping.

    Args:
        shape: what the file is, said when it is not a mapping (``a drill is a mapping (name, target, …)``).

    Raises:
        error: ``source:line: not valid YAML (problem)``, or ``source:1: {shape}``.
    """
    data, root = parse_yaml(text, source=source, error=error)
    if not isinstance(data, dict):
        raise error(f"{source}:1: {shape}")
    return data, root


def line_of(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int:
    """1-based line of the deepest YAML node that exists along ``loc`` (a key's line for mapping entries)."""
    if root is None:
        return 1
    node: yaml.Node = root
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    line = key.start_mark.line + 1
                    node = value
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def field_path(loc: tuple[int | str, ...]) -> str:
    """``gpus[1].hbm_gbps`` from pydantic's location tuple."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def first_error(exc: ValidationError, root: yaml.Node | None, source: str) -> str:
    """One line for the first validation error: ``source:line: field.path message (got value)``."""
    loc, what = pydantic_problem(exc, BaseModel)
    return f"{source}:{line_of(root, loc)}: {what}"


def pydantic_problem(exc: ValidationError, model: type[BaseModel]) -> tuple[tuple[int | str, ...], str]:
    """The first error in pydantic's words: ``field.path message (got value)`` (``model`` is not needed)."""
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
    return loc, f"{field_path(loc) or 'file'} {msg}{got}"


def flat_problem(exc: ValidationError, model: type[BaseModel]) -> tuple[tuple[int | str, ...], str]:
    """The first problem (an unknown field first) in :func:`tailscope.io._schema.describe`'s words."""
    e = first_problem(exc)
    return tuple(e["loc"]), describe(e, model)


def validate_yaml_mapping(
    text: str,
    model: type[M],
    *,
    source: str,
    error: type[TailscopeError],
    shape: str,
    problem: Problem = flat_problem,
) -> tuple[M, yaml.Node | None]:
    """:func:`parse_yaml_mapping`, then ``model`` validated from the mapping: ``(validated model, node tree)``.

    Args:
        shape: what the file is, said when it is not a mapping.
        problem: the location and words of a validation error (default :func:`flat_problem`).

    Raises:
        error: ``source:line: not valid YAML (problem)``, ``source:1: {shape}``, or ``source:line: {what}`` for the
            validation problem ``problem`` picks (the line of its location).
    """
    data, root = parse_yaml_mapping(text, source=source, error=error, shape=shape)
    try:
        return model.model_validate(data), root
    except ValidationError as exc:
        loc, what = problem(exc, model)
        raise error(f"{source}:{line_of(root, loc)}: {what}") from None
