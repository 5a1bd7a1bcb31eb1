"""The database servers the memory backends' tests use, and their clean-up."""

from __future__ import annotations

import os
from typing import Any

REDIS_URL = os.environ.get("TETHER_TEST_REDIS", "redis://127.0.0.1:6379/0")


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
