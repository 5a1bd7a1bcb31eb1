"""The SQL of a memory query's filters, for ``SqliteMemory``."""

from __future__ import annotations

import sqlite3
from typing import Any

from tether.memory.base import MemoryQuery

__all__ = ["filters", "passing_rows"]


def filters(query: MemoryQuery, now: float, prefix: str) -> tuple[str, list[Any]]:
    """A WHERE clause for the query's filters (metadata: scalars only; all re-checked)."""
    where = [f"{prefix}namespace = ?", f"({prefix}expires IS NULL OR {prefix}expires > ?)"]
    params: list[Any] = [query.namespace, now]
    if query.kinds:
        where.append(f"{prefix}kind IN ({','.join('?' * len(query.kinds))})")
        params.extend(query.kinds)
    if query.after is not None:
        where.append(f"{prefix}created >= ?")
        params.append(query.after.timestamp())
    if query.before is not None:
        where.append(f"{prefix}created < ?")
        params.append(query.before.timestamp())
    for key, value in query.metadata.items():
        if isinstance(value, bool | int | float | str) and not any(c in key for c in '"\\'):
            path = '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
            where.append(f"json_extract({prefix}metadata, ?) = ?")
            params.extend([path, int(value) if isinstance(value, bool) else value])
    return " AND ".join(where), params


def passing_rows(
    db: sqlite3.Connection, rows: list[int], where: str, params: list[Any]
) -> set[int]:
    """Which of ``rows`` pass the filters ``where`` (made with the "+" prefix).

    The rows are looked up by rowid, never by a scan of the namespace's index.
    """
    marks = ",".join("?" * len(rows))
    sql = f"SELECT rowid FROM memory_records WHERE rowid IN ({marks}) AND {where}"
    return {rowid for (rowid,) in db.execute(sql, (*rows, *params))}
