"""What many frozen records do the same way: write their JSON document field by field, and be found by a key."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")


def record_dict(record: DataclassInstance) -> dict[str, Any]:
    """A record's JSON document: every field under its own name, in declaration order.

    Tuples become lists and dicts are copied, so the document shares no container with the (frozen) record; a
    nested record with a ``to_dict`` (a :class:`~tailscope.metrics.percentiles.Stats`, …) becomes its own document;
    other values are kept as they are (a record whose document differs from its fields writes its own ``to_dict``).
    """
    return {f.name: _document(getattr(record, f.name)) for f in fields(record)}


class FieldsDocument:
    """A record whose JSON document is its fields: ``to_dict()`` is :func:`record_dict` (a base of frozen slotted
    dataclasses; it adds no slot)."""

    __slots__ = ()

    def to_dict(self: DataclassInstance) -> dict[str, Any]:
        return record_dict(self)


def _document(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def find_record(records: Iterable[T], key: Callable[[T], str], wanted: str) -> T:
    """The first of ``records`` whose ``key`` is ``wanted`` (a checklist's item by id, a compare row by label, …).

    Raises:
        KeyError: ``wanted``, when no record has that key.
    """
    for r in records:
        if key(r) == wanted:
            return r
    raise KeyError(wanted)
