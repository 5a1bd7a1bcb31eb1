"""How a run's awaits are interrupted: its deadlines, ``cancel()``, and Ctrl-C.

One ``Interrupts`` per run holds everything the parts of a run share about stopping an
await: the run's task and its watchdog (one timer for the deadline of the await in flight),
whether an await may be interrupted now, the cancellations the run itself asked for, and
why the run is being cancelled. ``settle`` classifies a ``CancelledError`` that reached
one of the run's awaits; ``begin`` and ``end`` bracket every such await.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Literal

from tether.run.base import Cancelled
from tether.run.watchdog import Watchdog

__all__ = ["Interrupts", "Settled", "Unwound", "drives_a_run"]

_DRIVING: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
"""The tasks a run is going on in (each run tells its own cancellations by its task's)."""


def drives_a_run(task: asyncio.Task[Any]) -> bool:
    """Whether a run is going on in ``task``: another one (a tool's agent) needs its own."""
    return task in _DRIVING


Settled = Literal["timeout", "cancel", "tool", "external"]
"""What a ``CancelledError`` at one of the run's awaits was (see ``Interrupts.settle``)."""

Unwound = Literal["timeout", "tool"]
"""What ``Interrupts.unwind`` leaves to the await: its own timeout, or the awaited code's
own ``CancelledError``."""


class Interrupts:
    """The run's interruption state (see the module docstring)."""

    __slots__ = (
        "before",
        "detached",
        "interrupted",
        "interruptible",
        "reason",
        "requests",
        "task",
        "watchdog",
    )

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        """The task driving the run (set by ``bind``)."""
        self.watchdog: Watchdog | None = None
        """The deadline of the await in flight (set by ``bind``)."""
        self.interruptible = False
        """Whether an await is in flight that ``cancel()`` may interrupt."""
        self.requests = 0
        """Cancellations of the task that ``cancel()`` made and nobody has settled yet."""
        self.detached = False
        """``detach()``: the run stops here without an ending, as a crash would leave it."""
        self.reason: str | None = None
        """Why the run is being cancelled (``None``: it is not)."""
        self.interrupted = False
        """Ctrl-C reached the run: it ends ``cancelled``, then ``KeyboardInterrupt`` goes on."""
        self.before = 0
        """The task's pending cancellations when the await in flight began (``owed``)."""

    def bind(self, task: asyncio.Task[Any]) -> Watchdog:
        """The run starts on ``task``; its watchdog."""
        self.task = task
        _DRIVING.add(task)
        watchdog = self.watchdog = Watchdog(task)
        return watchdog

    def close(self) -> None:
        """The run is over: drop the watchdog's timer."""
        if self.task is not None:
            _DRIVING.discard(self.task)
        if self.watchdog is not None:
            self.watchdog.close()

    def begin(self, timeout: float | None) -> None:
        """An interruptible await starts, bounded to ``timeout`` seconds (``None``: not)."""
        watchdog = self.watchdog
        assert watchdog is not None
        watchdog.arm(timeout)
        self.interruptible = True
        if self.task is not None:
            self.before = self.task.cancelling()

    def end(self) -> None:
        """The await is over."""
        self.interruptible = False
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.disarm()

    def request(self, reason: str) -> None:
        """``cancel()``: remember why, and interrupt the await in flight if there is one.

        From inside the run (a tool cancelling its own run) the reason suffices: the run
        checks it before its next step.
        """
        self.reason = reason
        task = self.task
        if (
            self.interruptible
            and task is not None
            and not task.done()
            and asyncio.current_task() is not task
        ):
            self.requests += 1
            task.cancel()

    def interrupt(self, reason: str) -> None:
        """Ctrl-C reached the run (``KeyboardInterrupt`` in the model call or a tool)."""
        self.reason = reason
        self.interrupted = True

    def ours(self) -> bool:
        """Whether a cancellation reaching a tool now comes from the run (timeout, cancel)."""
        watchdog = self.watchdog
        return self.requests > 0 or (watchdog is not None and watchdog.expired)

    def owed(self) -> bool:
        """Whether the task's owner cancelled it during an await that swallowed it (it goes on).

        Counted from the await's start: a cancellation of the run's own that an earlier await
        swallowed (its timeout) is not the owner's.
        """
        task, watchdog = self.task, self.watchdog
        if task is None or watchdog is None:
            return False
        own = self.requests + (1 if watchdog.expired else 0)
        return task.cancelling() - self.before > own

    def settle(self) -> Settled:
        """Classify a ``CancelledError`` just raised by one of the run's awaits.

        ``timeout``: the watchdog's deadline; ``cancel``: ``cancel()``; both are withdrawn
        from the task. ``tool``: nobody cancelled the task: the awaited code raised it itself.
        ``external``: the task's owner cancelled it (perhaps as well): it must propagate,
        the rule ``asyncio.timeout`` follows.
        """
        task = self.task
        watchdog = self.watchdog
        assert task is not None
        assert watchdog is not None
        own = self.requests + (1 if watchdog.expired else 0)
        pending = task.cancelling()
        if pending == 0:
            return "tool"
        for _ in range(min(own, pending)):  # withdraw ours, so an outer timeout counts right
            task.uncancel()
        self.requests = 0
        expired = watchdog.expired
        watchdog.expired = False
        if own == 0 or pending > own:
            return "external"
        if self.reason is not None:
            return "cancel"
        return "timeout" if expired else "external"

    def unwind(self, exc: asyncio.CancelledError) -> Unwound:
        """``settle`` ``exc`` (call it where it was caught), and unwind what is not the await's.

        The run's own ``cancel()`` raises ``Cancelled`` (the loop ends the run); the task's
        owner's cancellation raises ``exc`` again. What is left is for the await to answer:
        ``timeout`` (its deadline passed) or ``tool`` (the awaited code raised it itself).
        """
        match self.settle():
            case "cancel":
                raise Cancelled from None
            case "external":
                raise exc
            case how:
                return how
