"""What many frozen records do the same way: write their JSON document field by field."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


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

