"""Run stores: where runs' event logs live (in memory, SQLite; PostgreSQL later).

The same backends keep key-value entries for agents (``KeyValueStore``).
"""

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
from tether.stores.retention import parse_age, prune
from tether.stores.sqlite import SqliteStore, default_store_path
from tether.stores.transfer import export_run, import_events, import_run

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
