"""PostgresMemory where PostgreSQL itself refuses: a lock held elsewhere, values past its limits."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.memory.servers import PG_URL, drop, postgres_answers
from tether.errors import ConfigError, InvalidEntry, StoreBusy
from tether.memory import MemoryQuery, MemoryRecord
from tether.memory.postgres import PostgresMemory


@pytest.fixture
async def table() -> AsyncIterator[str]:
    if (why := await postgres_answers()) is not None:
        pytest.skip(why)
    import psycopg

    name = f"tether_mem_{uuid.uuid4().hex[:12]}"
    yield name
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(drop(name))


async def test_a_table_locked_by_another_session_fails_in_time_and_says_why(table: str) -> None:
    # the search waited for the lock for ever, and the run that recalled with it
    import psycopg
    from psycopg.sql import SQL, Identifier

    memory = PostgresMemory(PG_URL, table=table, statement_timeout=1)
    fresh = PostgresMemory(PG_URL, table=table, statement_timeout=1)
    try:
        await memory.put(MemoryRecord(namespace="ns", text="the deploy runs on fridays"))
        async with await psycopg.AsyncConnection.connect(PG_URL) as other:
            await other.execute(
                SQL("LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE").format(t=Identifier(table))
            )
            with pytest.raises(StoreBusy, match="statement_timeout"):
                await memory.search(MemoryQuery(namespace="ns", text="deploy"))
            with pytest.raises(StoreBusy, match="lock another session holds"):
                await fresh.search(MemoryQuery(namespace="ns", text="deploy"))  # makes tables
            await other.rollback()
        found = await memory.search(MemoryQuery(namespace="ns", text="deploy"))
        assert [r.text for r in found.records] == ["the deploy runs on fridays"]
    finally:
        await memory.close()
        await fresh.close()


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf")])
def test_a_statement_timeout_that_is_not_a_time_is_refused(seconds: float) -> None:
    with pytest.raises(ConfigError, match="statement_timeout"):
        PostgresMemory(PG_URL, statement_timeout=seconds)


async def test_a_record_past_postgresqls_limits_is_refused_with_what_to_do(table: str) -> None:
    # a raw StoreError ("string is too long for tsvector"); SQLite and Redis keep these
    memory = PostgresMemory(PG_URL, table=table)
    try:
        many_words = " ".join(f"w{i}" for i in range(300_000))
        with pytest.raises(InvalidEntry, match="split a text"):
            await memory.put(MemoryRecord(namespace="ns", text=many_words))
        with pytest.raises(InvalidEntry, match="id under 1,000 characters"):
            await memory.put(MemoryRecord(namespace="ns", text="x", id=secrets.token_hex(6000)))
        await memory.put(MemoryRecord(namespace="ns", text="still writable", id="ok"))
        assert [r.id for r in await memory.get("ns", ["ok"])] == ["ok"]
    finally:
        await memory.close()


async def test_a_session_the_server_ended_is_opened_again(table: str) -> None:
    # the next call failed ("terminating connection due to administrator command"), and
    # only the one after it connected again: a run's recall or write was lost to a restart
    import psycopg

    memory = PostgresMemory(PG_URL, table=table)
    try:
        await memory.put(MemoryRecord(namespace="ns", text="the deploy runs on fridays"))
        for _ in range(2):
            async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as admin:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = '' AND pid <> pg_backend_pid() "
                    "AND query LIKE %s",
                    (f"%{table}%",),
                )
            found = await memory.search(MemoryQuery(namespace="ns", text="deploy"))
            assert [r.text for r in found.records] == ["the deploy runs on fridays"]
        await memory.put(MemoryRecord(namespace="ns", text="and the backup on sundays"))
    finally:
        await memory.close()
