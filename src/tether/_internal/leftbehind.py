"""Tasks left to finish on their own: out of the loop's registry, held until they end.

``asyncio.run`` cancels and awaits every task of its loop when it ends: one that ignores
cancellation (an abandoned tool call, a stuck hook) would keep the program from exiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["leave_behind"]

_LEFT: set[asyncio.Future[Any]] = set()
"""Held here so that they are not garbage-collected mid-way."""


def leave_behind(task: asyncio.Future[Any]) -> None:
    """Let ``task`` go on by itself: nobody awaits it, and the loop's shutdown does not."""
    _LEFT.add(task)
    task.add_done_callback(_LEFT.discard)
    unregister = getattr(asyncio.tasks, "_unregister_task", None)
    if unregister is not None and isinstance(task, asyncio.Task):
        unregister(task)
