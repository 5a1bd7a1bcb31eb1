"""Tasks left to finish on their own: out of the loop's registry, held until they end.

``asyncio.run`` cancels and awaits every task of its loop when it ends: one that ignores
cancellation (an abandoned tool call, a stuck hook) would keep the program from exiting.
One still pending when the program exits never finished: that is said in one line on the
``tether`` logger, naming it, instead of asyncio's "Task was destroyed but it is pending!"
and a stack of internals.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from typing import Any

__all__ = ["leave_behind"]

_LEFT: dict[asyncio.Future[Any], str] = {}
"""Held here so that they are not garbage-collected mid-way; what each one is, in words."""

_log = logging.getLogger("tether")


def leave_behind(task: asyncio.Future[Any], what: str = "") -> None:
    """Let ``task`` go on by itself: nobody awaits it, and the loop's shutdown does not.

    ``what``: what it is, for the line said at exit if it never finished ("" says nothing).
    """
    _LEFT[task] = what
    task.add_done_callback(_forget)
    task._log_destroy_pending = False  # pyright: ignore[reportAttributeAccessIssue] - said below
    unregister = getattr(asyncio.tasks, "_unregister_task", None)
    if unregister is not None and isinstance(task, asyncio.Task):
        unregister(task)


def _forget(task: asyncio.Future[Any]) -> None:
    _LEFT.pop(task, None)


@atexit.register
def _unfinished() -> None:
    """At exit: what was left behind and never finished (its loop closed under it)."""
    for task, what in list(_LEFT.items()):
        if what and not task.done():
            _log.warning("tether: %s never finished: the program exited first", what)
    _LEFT.clear()
