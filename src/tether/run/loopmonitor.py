"""Seeing a blocked event loop from outside it: one thread per process, pinging each loop.

A tool written as ``async`` that calls blocking code (``time.sleep``, a sync HTTP client, a
long computation) holds the event loop: no timer fires, so its timeout cannot be enforced,
and every other run of the process stalls with it. From inside the loop that is invisible
until the call returns. This thread pings every loop that has a run (``call_soon_threadsafe``)
every ``PING`` seconds; a ping not answered within ``STALL`` seconds means the loop is
blocked, and the task running at that moment (``asyncio.current_task(loop)``) is the one
holding it. If it is a tool call the runs registered, the call is marked (``blocked``) and a
warning is logged with where the loop thread is; when the call returns, the run ends it with
a clear reason if it overran its timeout.

A process that owns its event loop (the CLI) can ask for more: ``exit_on_hang`` ends the
process, with a message, once a call has held the loop past its deadline by ``HANG`` seconds
(the run is then continued after a crash, as after ``kill -9``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["HANG", "PING", "STALL", "Call", "LoopMonitor", "exit_process", "monitor"]

_log = logging.getLogger("tether")

PING = 0.25
"""Seconds between pings of a watched loop."""
STALL = 0.5
"""Seconds a ping may go unanswered before the loop counts as blocked."""
HANG = 3.0
"""Seconds past its deadline a call may hold the loop before ``exit_on_hang`` acts."""


@dataclass(slots=True)
class Call:
    """What a task registered with the monitor is doing: a run's tool call, if any."""

    run_id: str
    tool: str | None = None
    """The tool being called (``None``: none now)."""
    deadline: float | None = None
    """Monotonic time by which the call should be done (``None``: no timeout)."""
    blocked_since: float | None = None
    """When the call was first seen holding the loop (monotonic), if it was."""

    def calling(self, tool: str, timeout: float | None) -> None:
        """A call of ``tool`` starts, due within ``timeout`` seconds."""
        self.tool = tool
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.blocked_since = None

    def done(self) -> float | None:
        """The call is over; returns when it was first seen holding the loop, if it was."""
        blocked, self.blocked_since, self.tool = self.blocked_since, None, None
        return blocked


class LoopMonitor:
    """The process's watcher of event loops (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, int] = {}
        self._calls: dict[asyncio.Task[Any], Call] = {}
        self._thread: threading.Thread | None = None
        self.exit_on_hang: Callable[[str], None] | None = None
        """Called (from the monitor's thread) with a message when a call hangs the loop."""

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching ``loop`` (counted: once per run on it).

        Only a count changes here: the thread is never woken on a run's hot path (a wake-up
        costs a hand-over of the GIL); it looks at the counts on its own, every ``PING``.
        """
        with self._lock:
            self._loops[loop] = self._loops.get(loop, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name="tether-loop-monitor", daemon=True
                )
                self._thread.start()

    def unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """One run on ``loop`` ended (the loop is forgotten once it has none and closes)."""
        with self._lock:
            self._loops[loop] = self._loops.get(loop, 1) - 1

    def begin(self, task: asyncio.Task[Any], call: Call) -> None:
        """``task`` now runs ``call`` (the run's own task for a sync tool)."""
        self._calls[task] = call

    def end(self, task: asyncio.Task[Any]) -> Call | None:
        """``task`` is done with its call; returns what was seen of it."""
        return self._calls.pop(task, None)

    def _main(self) -> None:
        pings: dict[asyncio.AbstractEventLoop, tuple[threading.Event, float]] = {}
        while True:
            with self._lock:
                for closed in [lp for lp, n in self._loops.items() if n <= 0 and lp.is_closed()]:
                    del self._loops[closed]
                loops = [lp for lp, n in self._loops.items() if n > 0]
            for gone in set(pings) - set(loops):
                del pings[gone]
            now = time.monotonic()
            for loop in loops:
                pending = pings.get(loop)
                if pending is None or pending[0].is_set():
                    answered = threading.Event()
                    try:
                        loop.call_soon_threadsafe(answered.set)
                    except RuntimeError:  # closed meanwhile
                        continue
                    pings[loop] = (answered, now)
                elif now - pending[1] > STALL:
                    self._blocked(loop, now)
            time.sleep(PING)

    def _blocked(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """``loop`` has not answered a ping for ``STALL`` seconds: find who holds it."""
        task = _running_task(loop)
        call = None if task is None else self._calls.get(task)
        if call is None or call.tool is None:
            return
        if call.blocked_since is None:
            call.blocked_since = now - STALL
            _log.warning(
                "tether: tool %r (run %s) is blocking the event loop: every run of this "
                "process is stalled until it returns. The loop thread is at:\n%s",
                call.tool,
                call.run_id,
                _stack_of(loop),
            )
        hook = self.exit_on_hang
        if hook is not None and call.deadline is not None and now > call.deadline + HANG:
            hook(
                f"tool {call.tool!r} has blocked the event loop for "
                f"{now - call.blocked_since:.0f}s, past its timeout; this process stops. The "
                f"run continues as after a crash: tether resume {call.run_id}"
            )


def _running_task(loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task(loop)
    except RuntimeError:
        return None


def _stack_of(loop: asyncio.AbstractEventLoop) -> str:
    thread_id = getattr(loop, "_thread_id", None)
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None  # pyright: ignore[reportPrivateUsage]
    if frame is None:
        return "  (unknown)"
    lines = traceback.format_stack(frame)[-6:]
    return "".join(lines).rstrip()


monitor = LoopMonitor()
"""The process's monitor."""


def exit_process(message: str) -> None:
    """An ``exit_on_hang`` for programs that own their process: say why, then exit 2."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    os._exit(2)
