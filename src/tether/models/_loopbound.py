"""Which event loop an SDK client was made in: its connections belong to that loop.

An adapter keeps its HTTP client between requests. ``Agent.run_sync`` (or ``asyncio.run``)
gives every run a loop of its own and closes it after: a client kept from the first run
holds connections of a closed loop, and the second run failed with "Event loop is closed"
(the request was sometimes sent and paid for). An adapter makes its client again in a loop
that is not the one it was made in; a client the caller passed in is the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tether.models.base import Model

__all__ = ["closing", "current_loop"]

T = TypeVar("T")


def current_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop (``None``: none runs in this thread)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def closing(work: Awaitable[T], model: Model | None) -> T:
    """``work``'s result, once ``model`` has closed its connections (a loop that ends)."""
    try:
        return await work
    finally:
        if model is not None:
            await model.aclose()
