"""The SQL of a memory query's filters, for ``SqliteMemory``."""

from __future__ import annotations

import sqlite3
from typing import Any

from tether.memory.base import MemoryQuery

__all__ = ["filters", "passing_rows"]


def filters(query: MemoryQuery, now: float, prefix: str) -> tuple[str, list[Any]]:
    """A WHERE clause for the query's filters (all re-checked in Python).

    Metadata: scalars, and lists of scalars; a key with a quote or a backslash is left out.
    """
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
        if any(c in key for c in '"\\'):  # no JSON path names it: re-checked only
            continue
        path = f'$."{key}"'
        if isinstance(value, bool | int | float | str) and _fits(value):
            where.append(f"json_extract({prefix}metadata, ?) = ?")
            params.extend([path, int(value) if isinstance(value, bool) else value])
        elif (
            isinstance(value, list)
            and len(value) <= 32
            and all(isinstance(v, bool | int | float | str) and _fits(v) for v in value)
        ):  # a list of scalars ("tags"): its length, then each item, compared as values
            # (its JSON text would differ: "caf\u00e9" stored, "café" asked; 1 and 1.0)
            where.append(f"json_array_length({prefix}metadata, ?) = ?")
            params.extend([path, len(value)])
            for index, item in enumerate(value):
                where.append(f"json_extract({prefix}metadata, ?) = ?")
                params.extend([f"{path}[{index}]", int(item) if isinstance(item, bool) else item])
    return " AND ".join(where), params


def _fits(value: object) -> bool:
    """Whether SQLite can bind ``value`` (an integer beyond 64 bits raised OverflowError)."""
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def passing_rows(
    db: sqlite3.Connection, rows: list[int], where: str, params: list[Any]
) -> set[int]:
    """Which of ``rows`` pass the filters ``where`` (made with the "+" prefix).

    The rows are looked up by rowid, never by a scan of the namespace's index.
    """
    marks = ",".join("?" * len(rows))
    sql = f"SELECT rowid FROM memory_records WHERE rowid IN ({marks}) AND {where}"
    return {rowid for (rowid,) in db.execute(sql, (*rows, *params))}
