"""Long-term memory (the port; backends come with the memory issue)."""

from tether.memory.base import Memory, MemoryRecord

__all__ = ["Memory", "MemoryRecord"]
