"""Late fields: event fields added after logs were written, hashed only when set."""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType
from typing import Any

__all__ = ["LATE", "late_fields"]

LATE = MappingProxyType({"late": True})
"""Metadata of a field added after logs were written (``field(default=None, metadata=LATE)``).

The hash covers it only when it is set: an event that leaves it ``None`` hashes exactly as
it did before the field existed, so every older log still verifies. Late fields come last.
"""


def late_fields(cls: type[Any]) -> tuple[str, ...]:
    """The names of ``cls``'s late fields (the last ones, each ``None`` by default)."""
    names = [f.name for f in fields(cls)]
    late = tuple(f.name for f in fields(cls) if f.metadata.get("late"))
    if late and tuple(names[-len(late) :]) != late:
        raise TypeError(f"{cls.__name__}: late fields must come after every other field")
    return late
