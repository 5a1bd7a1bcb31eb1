"""The memory backends every conformance test runs against (the ``make`` fixture)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from tests.memory.servers import (
    PG_URL,
    REDIS_URL,
    Make,
    drop,
    drop_redis,
    postgres_answers,
    redis_answers,
)
from tether.memory import Embedder, InProcessMemory, Memory, SqliteMemory
from tether.memory.postgres import PostgresMemory
from tether.memory.redis import RedisMemory


@pytest.fixture(params=["inprocess", "sqlite", "postgres", "redis"])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    """Builds memories of one backend (each test runs once per backend); drops them after."""
    made: list[Memory] = []
    tables: list[str] = []
    prefixes: list[str] = []
    if request.param == "postgres" and (why := await postgres_answers()) is not None:
        pytest.skip(why)
    if request.param == "redis" and (why := await redis_answers()) is not None:
        pytest.skip(why)

    async def build(
        *, embedder: Embedder | None = None, caps: Mapping[str, int] | None = None
    ) -> Memory:
        memory: Memory
        if request.param == "inprocess":
            memory = InProcessMemory(embedder=embedder, caps=caps)
        elif request.param == "sqlite":
            memory = SqliteMemory(tmp_path / f"memory{len(made)}.db", embedder=embedder, caps=caps)
        elif request.param == "redis":
            prefixes.append(f"tether-test:{uuid.uuid4().hex[:12]}")
            memory = RedisMemory(REDIS_URL, prefix=prefixes[-1], embedder=embedder, caps=caps)
        else:
            tables.append(f"tether_mem_{uuid.uuid4().hex[:12]}")
            memory = PostgresMemory(PG_URL, table=tables[-1], embedder=embedder, caps=caps)
        made.append(memory)
        return memory

    yield build
    for memory in made:
        await memory.close()
    for prefix in prefixes:
        await drop_redis(prefix)
    if tables:
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            for table in tables:
                await conn.execute(drop(table))
