"""Run stores: where runs' event logs live (in memory, SQLite; PostgreSQL later).

The same backends keep key-value entries for agents (``KeyValueStore``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether._internal.lazy import lazy_attributes
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunIndexStatus,
    RunInfo,
    RunNotFound,
    RunPosition,
    RunQuery,
    RunStore,
    StaleLease,
    StoreConflict,
    StoreWriteError,
    default_owner,
)
from tether.stores.kv import InvalidEntry, KeyValueStore, KvEntry
from tether.stores.memory import MemoryStore

if TYPE_CHECKING:
    from tether.stores.retention import parse_age, prune
    from tether.stores.sqlite import SqliteStore, default_store_path
    from tether.stores.transfer import export_run, import_events, import_run

_LAZY = {
    "SqliteStore": "tether.stores.sqlite",
    "default_store_path": "tether.stores.sqlite",
    "export_run": "tether.stores.transfer",
    "import_events": "tether.stores.transfer",
    "import_run": "tether.stores.transfer",
    "parse_age": "tether.stores.retention",
    "prune": "tether.stores.retention",
}
"""Loaded when first used: ``import tether`` does not pay for ``sqlite3`` (the engine never
needs it unless a run is given a SQLite store)."""


_SUBMODULES = frozenset({"retention", "sqlite", "transfer"})


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "InvalidEntry",
    "KeyValueStore",
    "KvEntry",
    "Lease",
    "LeaseHeld",
    "MemoryStore",
    "RunIndexStatus",
    "RunInfo",
    "RunNotFound",
    "RunPosition",
    "RunQuery",
    "RunStore",
    "SqliteStore",
    "StaleLease",
    "StoreConflict",
    "StoreWriteError",
    "default_owner",
    "default_store_path",
    "export_run",
    "import_events",
    "import_run",
    "parse_age",
    "prune",
]
