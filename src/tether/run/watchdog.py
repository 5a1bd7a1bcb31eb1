"""Deadlines for one task's awaits with a single, lazily re-armed timer.

``asyncio.timeout`` schedules and cancels a timer for every await; a run makes two bounded
awaits per step (the model, the tool), so that cost lands on the loop's hot path. The
watchdog keeps at most one timer per run. Arming with a deadline later than the pending
timer costs nothing; when the timer fires it checks the await in flight: past its deadline,
the task is cancelled (the await site turns that into ``TimeoutError``); otherwise the timer
is moved to that await's deadline.
"""

from __future__ import annotations

import asyncio

__all__ = ["Watchdog"]


class Watchdog:
    """Enforces the deadline of the one await a task has in flight."""

    __slots__ = ("_deadline", "_handle", "_loop", "_task", "_when", "expired")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self._loop = task.get_loop()
        self._task = task
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        self._deadline: float | None = None
        self.expired = False
        """Set when the watchdog cancelled the task because a deadline passed."""

    def arm(self, seconds: float | None) -> None:
        """Bound the next await to ``seconds`` from now (``None``: unbounded)."""
        self.expired = False
        if seconds is None:
            self._deadline = None
            return
        deadline = self._loop.time() + seconds
        self._deadline = deadline
        if self._handle is None or self._when > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_at(deadline, self._fire)
            self._when = deadline

    def disarm(self) -> None:
        """The await is over."""
        self._deadline = None

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        if self._loop.time() >= deadline:
            self._deadline = None
            self.expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(deadline, self._fire)
            self._when = deadline

    def close(self) -> None:
        """Drop the timer."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
