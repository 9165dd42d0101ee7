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

    Tuples become lists and dicts are copied, so the document shares no container with the (frozen) record; other
    values are kept as they are (a nested record is not converted: a record whose document differs from its fields
    writes its own ``to_dict``).
    """
    doc: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        doc[f.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, dict) else value
    return doc


def find_record(records: Iterable[T], key: Callable[[T], str], wanted: str) -> T:
    """The first of ``records`` whose ``key`` is ``wanted`` (a checklist's item by id, a compare row by label, …).

    Raises:
        KeyError: ``wanted``, when no record has that key.
    """
    for r in records:
        if key(r) == wanted:
            return r
    raise KeyError(wanted)
