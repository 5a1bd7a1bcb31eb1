"""A memory record as the SQL backends store it: one row, the same columns in each."""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from tether.jsontypes import JsonObject
from tether.memory.base import MemoryKind, MemoryRecord

__all__ = ["COLUMNS", "record_from_row", "row_values", "stored_vector", "upsert_sql"]

COLUMNS = (
    "namespace, id, text, kind, metadata, embedding, embedding_model, created, expires, "
    "importance, run_id, event_seq"
)
"""What a search reads, after the row's key (``rowid`` in SQLite, ``rid`` in PostgreSQL)."""


def upsert_sql(table: str, mark: str, *, metadata_cast: str = "") -> str:
    """The statement that stores a record (``row_values``), keeping ``created`` of a live one.

    ``mark`` is the driver's placeholder (``?``, ``%s``); ``metadata_cast`` follows the
    metadata's placeholder (``::jsonb``). The last placeholder is the current time.
    """
    marks = [mark] * 13
    marks[4] += metadata_cast
    return (
        f"INSERT INTO {table} (namespace, id, text, kind, metadata, embedding, "
        "embedding_model, dims, created, expires, importance, run_id, event_seq) "
        f"VALUES ({','.join(marks)}) ON CONFLICT (namespace, id) DO UPDATE SET "
        "text=excluded.text, kind=excluded.kind, metadata=excluded.metadata, "
        "embedding=excluded.embedding, embedding_model=excluded.embedding_model, "
        "dims=excluded.dims, expires=excluded.expires, importance=excluded.importance, "
        "run_id=excluded.run_id, event_seq=excluded.event_seq, "
        f"created=CASE WHEN {table}.expires IS NOT NULL AND {table}.expires <= {mark} "
        f"THEN excluded.created ELSE {table}.created END"
    )


def row_values(record: MemoryRecord, now: float) -> tuple[Any, ...]:
    """``upsert_sql``'s parameters for ``record`` (vectors as float32 bytes)."""
    vector = None if record.embedding is None else array("f", record.embedding).tobytes()
    return (
        record.namespace,
        record.id,
        record.text,
        record.kind,
        json.dumps(record.metadata, separators=(",", ":"), sort_keys=True),
        vector,
        record.embedding_model if vector is not None else None,
        len(record.embedding) if record.embedding is not None else None,
        record.created.timestamp() if record.created is not None else now,
        record.expires.timestamp() if record.expires is not None else None,
        record.importance,
        record.run_id,
        record.event_seq,
        now,
    )


def stored_vector(blob: bytes | None) -> tuple[float, ...] | None:
    """A stored float32 vector (``None``: none, or one that holds inf or NaN).

    Before records refused numbers beyond float32's range, such a vector was stored as inf,
    and the record it belonged to could not be read: it keeps its text, without the vector.
    """
    if not blob:
        return None
    vector = tuple(array("f", bytes(blob)))
    return vector if all(math.isfinite(x) for x in vector) else None


def record_from_row(row: Sequence[Any]) -> MemoryRecord:
    """The record of a row read as ``key, COLUMNS`` (metadata as JSON text or decoded)."""
    (
        _,
        namespace,
        id_,
        text,
        kind,
        metadata,
        blob,
        model,
        created,
        expires,
        importance,
        run_id,
        event_seq,
    ) = row
    kind_: MemoryKind = kind
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    if not isinstance(metadata, dict):  # stored before records had to hold an object
        metadata = {} if metadata is None else {"value": metadata}
    return MemoryRecord(
        namespace=namespace,
        text=text,
        id=id_,
        kind=kind_,
        metadata=cast(JsonObject, metadata),
        embedding=stored_vector(blob),
        embedding_model=model,
        created=datetime.fromtimestamp(created, UTC),
        expires=None if expires is None else datetime.fromtimestamp(expires, UTC),
        importance=importance,
        run_id=run_id,
        event_seq=event_seq,
    )
