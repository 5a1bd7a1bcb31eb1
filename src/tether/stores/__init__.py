"""Run stores: where runs' event logs live (in memory, SQLite; PostgreSQL later).

The same backends keep key-value entries for agents (``KeyValueStore``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunIndexStatus,
    RunInfo,
    RunNotFound,
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


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
