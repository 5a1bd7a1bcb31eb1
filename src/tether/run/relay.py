"""A run's batches from a task of its own, for a run iterated inside another run's task.

A run tells its own cancellations (its timeouts, ``cancel()``) from its owner's by the task
it goes on in. A sub-agent streamed inside a tool (``async for e in sub.stream(...)``) went
on in the calling run's task: the sub-run's tool timeout cancelled that task, the caller's
call took it for its owner's cancellation, and ``agent.run`` raised a bare
``CancelledError`` with no outcome. ``relayed`` drives the run's generator in a task of its
own, one batch per request, so the consumer still sets the pace: a batch is made only when
asked for, as with the generator itself. Cancelling the consumer cancels the run's task
(its end is recorded, as for any run whose task is cancelled); leaving the loop early
closes the generator in that task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, Literal, TypeVar

__all__ = ["drained", "relayed"]

T = TypeVar("T")

_Got = tuple[Literal["item", "end", "error"], Any]


async def relayed(gen: AsyncGenerator[T]) -> AsyncGenerator[T]:
    """``gen``'s items, each made in one task of its own (see the module docstring)."""
    asks: asyncio.Queue[bool] = asyncio.Queue()  # True: the next item; False: close
    gets: asyncio.Queue[_Got] = asyncio.Queue()

    async def drive() -> None:
        try:
            while await asks.get():
                try:
                    item = await gen.__anext__()
                except StopAsyncIteration:
                    gets.put_nowait(("end", None))
                    return
                except BaseException as exc:  # the consumer's to see, as from the generator
                    gets.put_nowait(("error", exc))
                    if isinstance(exc, asyncio.CancelledError):
                        raise  # (this task's own cancellation: it ends cancelled)
                    return
                gets.put_nowait(("item", item))
        finally:
            await gen.aclose()

    driver = asyncio.get_running_loop().create_task(drive())
    cancelled = False
    try:
        while True:
            asks.put_nowait(True)
            try:
                kind, value = await gets.get()
            except asyncio.CancelledError:
                cancelled = True
                raise
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        if not driver.done():
            if cancelled:
                driver.cancel()  # the run's task is cancelled: it records its end
            else:
                asks.put_nowait(False)  # the consumer stopped reading: closed in its task
        await asyncio.gather(driver, return_exceptions=True)


async def drained(gen: AsyncGenerator[Any]) -> None:
    """Iterate ``gen`` to its end, dropping what it yields (a run driven in a task of its own)."""
    async for _ in gen:
        pass
