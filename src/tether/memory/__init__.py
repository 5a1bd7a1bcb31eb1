"""Long-term memory: the port, its backends and embedders.

``InProcessMemory`` (tests, small runs), ``SqliteMemory`` (a file; FTS5 keywords and
vectors), ``PostgresMemory`` (shared by workers; ``tsvector`` keywords and vectors) and
``RedisMemory`` (short-term memory shared by processes, expiring when idle) are backends of
the ``Memory`` port; every one passes one conformance suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether._internal.lazy import lazy_attributes
from tether.memory.base import (
    KINDS,
    Memory,
    MemoryHit,
    MemoryKind,
    MemoryQuery,
    MemoryRecord,
    MemorySearch,
    SearchMode,
    record_id,
)
from tether.memory.embedder import Embedder

if TYPE_CHECKING:
    from tether.memory.inprocess import InProcessMemory
    from tether.memory.minilm import MiniLMEmbedder
    from tether.memory.openai import OpenAIEmbedder
    from tether.memory.postgres import PostgresMemory
    from tether.memory.redis import RedisMemory
    from tether.memory.sqlite import SqliteMemory

__all__ = [
    "KINDS",
    "Embedder",
    "InProcessMemory",
    "Memory",
    "MemoryHit",
    "MemoryKind",
    "MemoryQuery",
    "MemoryRecord",
    "MemorySearch",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "PostgresMemory",
    "RedisMemory",
    "SearchMode",
    "SqliteMemory",
    "record_id",
]

_LAZY = {
    "InProcessMemory": "tether.memory.inprocess",
    "MiniLMEmbedder": "tether.memory.minilm",
    "OpenAIEmbedder": "tether.memory.openai",
    "PostgresMemory": "tether.memory.postgres",
    "RedisMemory": "tether.memory.redis",
    "SqliteMemory": "tether.memory.sqlite",
}
"""Loaded when first used: ``import tether`` pays for no backend."""


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
