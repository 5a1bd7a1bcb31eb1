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


_SUBMODULES = frozenset({"retention", "sqlite", "transfer"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # ``tether.stores.sqlite`` without importing it first
        return import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


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
