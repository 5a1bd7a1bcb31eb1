"""The SQL of a memory query's filters, for ``SqliteMemory``."""

from __future__ import annotations

import sqlite3
from typing import Any

from tether.memory.base import MemoryQuery

__all__ = ["filters", "passing_rows"]


def filters(query: MemoryQuery, now: float, prefix: str) -> tuple[str, list[Any]]:
    """A WHERE clause for the query's filters (all re-checked in Python).

    Metadata: scalars, and lists of scalars (a key no JSON path can name, one with a quote or
    a backslash, is found with ``json_each``).
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
        odd = any(c in key for c in '"\\')  # no JSON path can name it: json_each finds it
        path = f'$."{key}"'
        if isinstance(value, bool | int | float | str) and _fits(value):
            scalar = int(value) if isinstance(value, bool) else value
            if odd:
                each = _EACH.format(m=f"{prefix}metadata", v="value")
                where.append(f"({each} AND type NOT IN ('array', 'object')) = ?")
                params.extend([key, scalar])
            else:
                where.append(f"json_extract({prefix}metadata, ?) = ?")
                params.extend([path, scalar])
        elif (
            isinstance(value, list)
            and len(value) <= 32
            and all(isinstance(v, bool | int | float | str) and _fits(v) for v in value)
        ):  # a list of scalars ("tags"): its length, then each item, compared as values
            # (its JSON text would differ: "caf\u00e9" stored, "café" asked; 1 and 1.0)
            items = [int(v) if isinstance(v, bool) else v for v in value]
            if odd:
                each = _EACH.format(m=f"{prefix}metadata", v="json_array_length(value)")
                where.append(f"({each} AND type = 'array') = ?")
                params.extend([key, len(value)])
                each = _EACH.format(m=f"{prefix}metadata", v="json_extract(value, ?)")
                for index, item in enumerate(items):
                    where.append(f"({each} AND type = 'array') = ?")
                    params.extend([f"$[{index}]", key, item])
            else:
                where.append(f"json_array_length({prefix}metadata, ?) = ?")
                params.extend([path, len(value)])
                for index, item in enumerate(items):
                    where.append(f"json_extract({prefix}metadata, ?) = ?")
                    params.extend([f"{path}[{index}]", item])
    return " AND ".join(where), params


_EACH = "SELECT {v} FROM json_each({m}) WHERE key = ?"
"""A metadata key's value, found by its name (for keys no JSON path can spell)."""


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
