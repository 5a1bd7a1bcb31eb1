"""The database servers the memory backends' tests use, and their clean-up."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.sql import SQL, Composed, Identifier

from tether.memory import Memory

REDIS_URL = os.environ.get("TETHER_TEST_REDIS", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("TETHER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

Make = Callable[..., Awaitable[Memory]]
"""The ``make`` fixture (``tests/memory/conftest.py``): a new memory of the backend tested."""


def drop(table: str) -> Composed:
    """Drop a ``PostgresMemory``'s tables."""
    return SQL("DROP TABLE IF EXISTS {t}, {v}").format(
        t=Identifier(table), v=Identifier(f"{table}_versions")
    )


async def postgres_answers() -> str | None:
    """Why PostgreSQL cannot be used here (``None``: it answers)."""
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(PG_URL, connect_timeout=3)
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL server at {PG_URL}: {exc}"
    await conn.close()
    return None


def _redis_client(**options: Any) -> Any:
    import redis.asyncio

    return redis.asyncio.Redis.from_url(REDIS_URL, **options)  # pyright: ignore[reportUnknownMemberType]


async def redis_answers() -> str | None:
    """Why Redis cannot be used here (``None``: it answers)."""
    import redis.exceptions

    client = _redis_client(socket_connect_timeout=3)
    try:
        await client.ping()
    except redis.exceptions.RedisError as exc:
        return f"no Redis server at {REDIS_URL}: {exc}"
    finally:
        await client.aclose()
    return None


async def drop_redis(prefix: str) -> None:
    """Delete every key under ``prefix`` (a test's memory)."""
    client = _redis_client()
    try:
        keys: list[Any] = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
