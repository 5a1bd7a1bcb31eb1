"""The memory's SQLite file: its tables, whether a file holds others', what its errors mean."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.errors import (
    StoreBusy,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    StoreWriteError,
)
from tether.memory.rows import COLUMNS

__all__ = ["SCHEMA", "foreign_tables", "sqlite_error"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_records (
    rowid INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    id TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    metadata TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT,
    dims INTEGER,
    created REAL NOT NULL,
    expires REAL,
    importance REAL NOT NULL,
    run_id TEXT,
    event_seq INTEGER,
    UNIQUE (namespace, id)
);
CREATE INDEX IF NOT EXISTS memory_records_vectors
    ON memory_records (namespace, embedding_model, dims);
CREATE INDEX IF NOT EXISTS memory_records_expires ON memory_records (expires);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
    text, content='memory_records', content_rowid='rowid', tokenize='unicode61'
);
CREATE TABLE IF NOT EXISTS memory_versions (
    namespace TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS memory_records_ai AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_fts (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS memory_records_ad AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER IF NOT EXISTS memory_records_au AFTER UPDATE OF text ON memory_records BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO memory_fts (rowid, text) VALUES (new.rowid, new.text);
END;
"""
"""The memory's tables, made when missing (a run store's tables in the file are others)."""

_OWN_COLUMNS = frozenset(("dims", *(c.strip() for c in COLUMNS.split(","))))


def foreign_tables(db: sqlite3.Connection) -> str | None:
    """What in the file is not the memory's own tables (``None``: nothing, or no tables yet).

    ``CREATE ... IF NOT EXISTS`` keeps a table of that name whatever it holds, and the
    memory then failed on a missing column, saying nothing of why.
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(memory_records)")}
    if columns and (missing := sorted(_OWN_COLUMNS - columns)):
        return f"its memory_records table has no {', '.join(missing)} column" + "s" * (
            len(missing) > 1
        )
    row = db.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_fts'").fetchone()
    if row is not None and "fts5" not in str(row[0]).lower():
        return "its memory_fts table is not an FTS5 index"
    return None


def sqlite_error(exc: sqlite3.Error, path: Path, doing: str) -> StoreError:
    """The store error a ``sqlite3`` error means, naming the memory's file and what to do."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StoreBusy(
            f"the memory {path} is locked by another process and stayed locked while {doing}; "
            "close that program, or wait for it, and try again"
        )
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text or name == "SQLITE_NOTADB":
        return StoreCorrupt(
            f"the memory {path} is damaged or not a SQLite file ({text}): restore a backup, "
            f"or recover what is readable with `sqlite3 {path} .recover`"
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_FULL", "SQLITE_IOERR")):
        return StoreWriteError(
            f"the memory {path} could not be written while {doing} ({text}): free space or "
            "fix its permissions; what was stored before is intact"
        )
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM")):
        return StoreUnavailable(
            f"cannot open the memory {path} ({text}): check that this user may read and "
            "write the file and its directory"
        )
    return StoreError(f"the memory {path} failed while {doing}: {text}")
