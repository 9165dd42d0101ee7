"""Pydantic at the file boundary: one ``file:line: field what is wrong (got value)`` line per problem, and the
numbered rows of JSON-lines files."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from pydantic import AfterValidator, BaseModel, ValidationError

from tailscope.errors import TailscopeError

R = TypeVar("R")


def one_of(choices: Sequence[str]) -> AfterValidator:
    """A validator for a text field whose value must be one of ``choices``, for ``Annotated[str, one_of(...)]``: the
    error names them and the value given (``must be one of a, b (got 'c')``)."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return AfterValidator(check)


def json_lines(text: str, *, source: str, error: type[TailscopeError]) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` for every non-blank line of JSON-lines ``text``.

    Raises:
        error: ``source:line: not valid JSON (problem at column c)`` for the first line that is not JSON.
    """
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{source}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def validate_row(
    model: type[BaseModel], obj: Any, *, source: str, line: int, needs: str, error: type[TailscopeError]
) -> Any:
    """``model`` validated from one row; the first problem becomes ``source:line: field what (got value)``.

    Args:
        needs: what a row must hold, said when a field is missing (``a row needs timestamp_s, input_tokens and …``).

    Raises:
        error: for the first problem (an unknown field before the others, as a row is read left to right).
    """
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        e = first_problem(exc)
        raise error(f"{source}:{line}: {describe(e, model, needs=needs)}") from None


def first_problem(exc: ValidationError) -> Any:
    """The problem to report first: an unknown field before the others, as a reader meets them left to right."""
    return sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")[0]


def nested_problem(exc: ValidationError, model: type[BaseModel], *, see: str) -> tuple[Any, tuple[Any, ...], str]:
    """The first problem of a nested ``model``: ``(pydantic error, location, what is wrong)``.

    :func:`describe` lists the top level's fields for an unknown one; below the top level the field is named by its
    whole path and the reader sent to ``see`` (the doc that lists a section's fields).
    """
    e = first_problem(exc)
    loc = tuple(e["loc"])
    what = describe(e, model)
    if e["type"] == "extra_forbidden" and len(loc) > 1:
        what = f"unknown field {'.'.join(str(p) for p in loc)!r} (see {see})"
    return e, loc, what


def describe(e: Any, model: type[BaseModel], *, needs: str = "") -> str:
    """``field what is wrong (got value)`` for one pydantic error of a flat ``model``.

    Args:
        needs: what the mapping must hold, said when a field is missing.
    """
    field = ".".join(str(p) for p in e["loc"]) or "row"
    kind, got = e["type"], e.get("input")
    if kind == "missing":
        return f"missing {field!r} ({needs})" if needs else f"missing {field!r}"
    if kind == "extra_forbidden":
        allowed = sorted(f.alias or name for name, f in model.model_fields.items())
        return f"unknown field {field!r} (allowed: {', '.join(allowed)})"
    if kind == "value_error":  # a validator's own words, which say what the value was where it helps
        return f"{field} {str(e['msg']).removeprefix('Value error, ')}"
    if kind.startswith("int_"):
        what = "a whole number"
    elif kind.startswith("float_"):
        what = "a number"
    elif kind == "string_too_short":
        what = "a non-empty string"
    elif kind in ("greater_than_equal", "greater_than"):
        sign = "≥" if kind == "greater_than_equal" else ">"
        what = f"{sign} {e['ctx']['ge' if kind == 'greater_than_equal' else 'gt']:g}"
    else:  # pydantic's words: "Input should be a valid string" → "must be a valid string"
        what = str(e["msg"]).removeprefix("Input should be ")
    return f"{field} must be {what} (got {got!r})"


def record_from(cls: type[R], model: BaseModel, **given: Any) -> R:
    """The frozen record ``cls`` (a dataclass) from a validated ``model`` that holds its fields under the same names;
    ``given`` are the fields that are not a plain copy (a converted value, a line number).

    Raises:
        AttributeError: a field neither given nor on the model (a mismatch in the code, not in the user's file).
    """
    copied = {f.name: getattr(model, f.name) for f in fields(cls) if f.name not in given}  # type: ignore[arg-type]
    return cls(**copied, **given)
