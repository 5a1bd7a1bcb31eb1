"""SqliteMemory on a file that already holds tables of its names: another program's, or version's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tether.errors import StoreUnavailable
from tether.memory import MemoryQuery, MemoryRecord, SqliteMemory


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("CREATE TABLE memory_records (id TEXT, text TEXT)", "has no created, dims, "),
        ("CREATE TABLE memory_fts (text TEXT)", "memory_fts table is not an FTS5 index"),
    ],
)
async def test_a_file_with_tables_of_the_memorys_names_is_reported_and_left_alone(
    tmp_path: Path, table: str, says: str
) -> None:
    # "failed while opening it: no such column: embedding_model", which said nothing of why
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as db:
        db.execute(table)
        db.execute("CREATE TABLE keep (x)")
    before = sqlite3.connect(path).execute("SELECT sql FROM sqlite_master").fetchall()
    memory = SqliteMemory(path)
    try:
        with pytest.raises(StoreUnavailable, match=says) as raised:
            await memory.put(MemoryRecord(namespace="ns", text="x"))
        assert "file of its own" in str(raised.value)
        with pytest.raises(StoreUnavailable, match=says):
            await memory.search(MemoryQuery(namespace="ns", text="x"))
    finally:
        await memory.close()
    assert sqlite3.connect(path).execute("SELECT sql FROM sqlite_master").fetchall() == before
