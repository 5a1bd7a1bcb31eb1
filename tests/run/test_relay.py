"""``relayed``: a generator driven from a task of its own, at the consumer's pace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from tether.run.relay import drained, relayed


async def test_items_are_made_in_one_other_task_only_when_asked_for() -> None:
    made: list[int] = []
    tasks: set[asyncio.Task[object] | None] = set()

    async def gen() -> AsyncGenerator[int]:
        for i in range(3):
            tasks.add(asyncio.current_task())
            made.append(i)
            yield i

    seen: list[int] = []
    async for item in relayed(gen()):
        seen.append(item)
        assert made == seen  # nothing made ahead of the consumer
    assert seen == [0, 1, 2]
    assert len(tasks) == 1
    assert asyncio.current_task() not in tasks


async def test_an_error_reaches_the_consumer_and_leaving_early_closes_the_generator() -> None:
    closed: list[str] = []

    async def failing() -> AsyncGenerator[int]:
        yield 1
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        async for _ in relayed(failing()):
            pass

    async def endless() -> AsyncGenerator[int]:
        try:
            while True:
                yield 1
        finally:
            closed.append("closed")

    stream = relayed(endless())
    async for _ in stream:
        break
    await stream.aclose()
    assert closed == ["closed"]


async def test_cancelling_the_consumer_cancels_the_generators_task() -> None:
    cancelled: list[bool] = []

    async def slow() -> AsyncGenerator[int]:
        try:
            await asyncio.sleep(10)
            yield 1
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def consume() -> None:
        async for _ in relayed(slow()):
            pass

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(consume(), 0.1)
    assert cancelled == [True]

    async def three() -> AsyncGenerator[int]:
        for i in range(3):
            yield i

    await drained(three())
