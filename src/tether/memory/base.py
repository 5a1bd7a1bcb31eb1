"""The long-term memory port. Backends and the loop's use of memory arrive in a later issue."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import field

from tether._internal.frozen import frozen
from tether.content import JsonObject

__all__ = ["Memory", "MemoryRecord"]


@frozen
class MemoryRecord:
    """One remembered thing."""

    id: str
    """The record's id."""
    namespace: str
    """Where it belongs (an agent, a user, a project)."""
    text: str
    """What is remembered."""
    metadata: JsonObject = field(default_factory=lambda: {})
    """Free-form attributes."""


class Memory(ABC):
    """Namespaced records with search."""

    @abstractmethod
    async def put(self, record: MemoryRecord) -> None:
        """Store or replace a record."""

    @abstractmethod
    async def search(self, namespace: str, query: str, *, limit: int = 5) -> Sequence[MemoryRecord]:
        """The records of ``namespace`` that best match ``query``."""
