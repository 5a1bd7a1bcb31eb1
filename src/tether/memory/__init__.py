"""Long-term memory (the port; backends come with the memory issue)."""

from tether.memory.base import MemoryRecord, MemoryStore

__all__ = ["MemoryRecord", "MemoryStore"]
