"""The SQLite store's key-value entries: the ``kv`` table and its queries.

Each write is one statement on an autocommit connection, so its own short transaction:
entries are not run events, and go through neither the pending file nor a lease.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from tether.jsontypes import JsonValue
from tether.stores.kv import KvEntry, check_key, decode_value, encode_value

__all__ = ["kv_delete", "kv_get", "kv_list", "kv_set"]

# The table is created with the rest of the schema (``_sqlitetables.SCHEMA``).


def kv_get(db: sqlite3.Connection, namespace: str, key: str) -> KvEntry | None:
    check_key(namespace, "namespace")
    check_key(key)
    row = db.execute(
        "SELECT value, updated_at FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()
    if row is None:
        return None
    return KvEntry(key=key, value=decode_value(row[0]), updated_at=datetime.fromisoformat(row[1]))


def kv_set(db: sqlite3.Connection, namespace: str, key: str, value: JsonValue) -> None:
    check_key(namespace, "namespace")
    check_key(key)
    text = encode_value(value)
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    db.execute(
        "INSERT INTO kv (namespace, key, value, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (namespace, key) DO UPDATE SET "
        "value = excluded.value, updated_at = excluded.updated_at",
        (namespace, key, text, now),
    )


def kv_delete(db: sqlite3.Connection, namespace: str, key: str) -> bool:
    check_key(namespace, "namespace")
    check_key(key)
    found = db.execute("DELETE FROM kv WHERE namespace = ? AND key = ?", (namespace, key))
    return found.rowcount > 0


def kv_list(db: sqlite3.Connection, namespace: str, prefix: str, limit: int) -> list[str]:
    check_key(namespace, "namespace")
    if prefix:
        check_key(prefix, "prefix")
    # A range on the primary key rather than LIKE, which would treat % and _ as wildcards
    # and ignore case. BINARY order of UTF-8 text is code-point order, as in Python.
    sql = "SELECT key FROM kv WHERE namespace = ? AND key >= ?"
    params: list[str | int] = [namespace, prefix]
    end = _after_prefix(prefix)
    if end is not None:
        sql += " AND key < ?"
        params.append(end)
    params.append(max(limit, 0))
    rows = db.execute(sql + " ORDER BY key LIMIT ?", params).fetchall()
    return [str(r[0]) for r in rows]


def _after_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (``None``: none)."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last == 0xD800:
            last = 0xE000  # surrogates are not keys
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None
