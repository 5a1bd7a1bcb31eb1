"""Running one tool call, bounded by its timeout whatever the tool does.

A tool written as ``async`` code may do anything, ignoring cancellation included, so each of
its calls runs in a task of its own: past its timeout the call is cancelled, and if it has
not stopped ``GRACE`` seconds later it is abandoned (left to finish in the background, its
result dropped, a line logged when it does) instead of holding the run. Sync functions run
inline or in a worker thread; a thread cannot be stopped, so past its timeout it is
abandoned the same way. An abandoned call's outcome is unknown: the run records it so.

``SystemExit`` raised by a tool is an error the model reads; ``KeyboardInterrupt`` is
reported as ``INTERRUPTED`` (it must not escape a task: asyncio would re-raise it out of the
event loop), and the run turns it into a cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Generator, Mapping
from functools import partial
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from tether._internal.leftbehind import leave_behind
from tether.content import ToolResult
from tether.errors import ApprovalRequired, ModelRetry
from tether.messages import ToolCall
from tether.policy.base import Policy
from tether.run.loopmonitor import Call, monitor
from tether.tools.base import Tool, ToolContext

__all__ = [
    "ABANDONED",
    "GRACE",
    "INTERRUPTED",
    "Drive",
    "Turn",
    "abandon",
    "abandoned_text",
    "bounded",
    "no_turn",
    "run_tool",
    "settle_within",
    "slot_for",
    "timed_out",
    "tool_error",
    "wake",
]

T = TypeVar("T")

_log = logging.getLogger("tether")

GRACE = 1.0
"""Seconds a call that was cancelled gets to stop before it is abandoned."""
ABANDONED = "abandoned"
"""The error type of a call that did not stop when cancelled (its outcome is unknown)."""
INTERRUPTED = "keyboard_interrupt"
"""The error type of a call that raised ``KeyboardInterrupt`` (the run is then cancelled)."""

_abandoned: set[asyncio.Future[Any]] = set()
"""Abandoned calls still running: held here so they are not garbage-collected mid-way."""
_NOBODY: Any = None  # the tool of a call that can no longer be abandoned again


def tool_error(tool: Tool, exc: BaseException, timeout: float | None) -> tuple[ToolResult, str]:
    """The result the model sees when a tool raised ``exc`` (a timeout included)."""
    match exc:
        case ModelRetry():
            return ToolResult.error(exc.message), "model_retry"
        case TimeoutError() if timeout is not None:
            return timed_out(tool.name, timeout), "timeout"
        case ApprovalRequired():
            return ToolResult.error(
                f"{tool.name} needs approval: {exc.reason}"
            ), "approval_required"
        case SystemExit():
            return ToolResult.error(
                f"{tool.name} failed: it called sys.exit({exc.code!r}), which a tool must not "
                "do (it would end the whole program)"
            ), "exception"
        case KeyboardInterrupt():
            return ToolResult.error(f"{tool.name} was interrupted (KeyboardInterrupt)"), INTERRUPTED
        case _:
            return ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {exc}"), "exception"


def timed_out(name: str, timeout: float) -> ToolResult:
    """The result of a call that did not finish within ``timeout`` and stopped when cancelled."""
    return ToolResult.error(f"{name} did not finish within {timeout:g}s and was cancelled")


def abandoned_text(tool: Tool, timeout: float | None) -> str:
    """What the model is told of a call that was abandoned (its outcome unknown)."""
    within = "" if timeout is None else f" within {timeout:g}s"
    how = (
        "it runs in a thread, which cannot be stopped"
        if tool.runs_as == "thread"
        else "it ignored cancellation"
    )
    return (
        f"{tool.name} did not finish{within} and {how}: it was abandoned and may still be "
        "running, or have taken effect. Do not assume either: check before calling it again"
    )


async def run_tool(
    tool: Tool,
    call: ToolCall,
    ctx: ToolContext,
    arguments: Mapping[str, Any],
    timeout: float | None,
) -> tuple[ToolResult, str | None]:
    """Run one call, turning every failure into an error result the model can read.

    With a ``timeout``, the call is bounded as ``bounded`` does (abandoned if it will not
    stop); without one, the caller bounds it.
    """
    if timeout is not None:
        return await bounded(run_tool(tool, call, ctx, arguments, None), timeout, tool)
    try:
        result = await tool.handler(ctx, arguments)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling() > 0:
            raise  # really cancelled
        return tool_error(tool, RuntimeError(f"raised CancelledError: {exc!r}"), None)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        return tool_error(tool, exc, None)
    return result, ("tool_error" if result.is_error else None)


def wake(waiter: asyncio.Future[None], _: object = None) -> None:
    """Resolve ``waiter`` (a done callback, or a timer's)."""
    if not waiter.done():
        waiter.set_result(None)


async def settle_within(task: asyncio.Future[Any], seconds: float | None) -> bool:
    """Wait up to ``seconds`` for ``task`` to be done (not cancelling it); whether it is."""
    if task.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    done = partial(wake, waiter)
    task.add_done_callback(done)
    timer = None if seconds is None else loop.call_later(seconds, wake, waiter)
    try:
        await waiter
    finally:
        task.remove_done_callback(done)
        if timer is not None:
            timer.cancel()
    return task.done()


def abandon(task: asyncio.Future[Any], tool: Tool, run_id: str) -> None:
    """Leave a call that will not stop to finish in the background; log when it does.

    It leaves the loop's task registry too: ``asyncio.run`` cancels and awaits every task
    when it ends, and one that ignores cancellation would keep the program from exiting.
    """
    started = time.monotonic()
    _abandoned.add(task)
    leave_behind(task, f"the abandoned call of tool {tool.name!r} (run {run_id})")

    def finished(done: asyncio.Future[Any]) -> None:
        _abandoned.discard(done)
        error = None if done.cancelled() else done.exception()
        _log.warning(
            "tether: the abandoned call of tool %r (run %s) finished %.1fs later%s; its "
            "result was dropped",
            tool.name,
            run_id,
            time.monotonic() - started,
            f" with {type(error).__name__}: {error}" if error is not None else "",
        )

    task.add_done_callback(finished)


class Turn:
    """Whether a capped call got its concurrency slot (a timeout before means it never ran)."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = False


def no_turn(tool: Tool, timeout: float) -> ToolResult:
    """The result of a call that waited for a concurrency slot past its timeout."""
    return ToolResult.error(
        f"{tool.name} did not get a turn within {timeout:g}s: the policy caps how many calls "
        "of it run at once and all were busy"
    )


class Drive:
    """Steps a tool call's coroutine on the awaiting task, and lets go of it if it must.

    ``await Drive(coro, ours)`` is ``await coro`` (the call runs on the run's own task, as a
    tool always did: ``asyncio.current_task()``, ``asyncio.timeout`` inside it work as
    usual), with one difference: between the coroutine and the task sits a stand-in future
    for each future the coroutine waits on. If a cancellation that is ``ours()`` (the run's
    timeout, or its ``cancel()``) reaches the coroutine and it does not stop, it gets
    ``GRACE`` seconds; then the stand-in is resolved, the task moves on with ``ABANDONED``,
    and the coroutine continues in a task of its own (``abandon``). A call that never waits
    (the common case) costs one ``send``: no task, no extra turn of the event loop.

    ``swallowed`` is set when the coroutine kept going after one of our cancellations (the
    caller then withdraws it from the task). ``ABANDONED`` is returned as ``(None,
    ABANDONED)``.
    """

    __slots__ = (
        "_coro",
        "_ours",
        "_proxy",
        "_run_id",
        "_tool",
        "_waiting",
        "abandoned",
        "swallowed",
    )

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        ours: Callable[[], bool],
        tool: Tool,
        run_id: str,
        *,
        waiting: asyncio.Future[Any] | None = None,
    ) -> None:
        self._coro = coro
        self._ours = ours
        self._tool = tool
        self._run_id = run_id
        self._waiting = waiting
        """A future the coroutine already waits on (a coroutine handed over mid-way)."""
        self._proxy: asyncio.Future[None] | None = None
        self.abandoned = False
        self.swallowed = False

    def __await__(self) -> Generator[Any, None, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        grace: asyncio.TimerHandle | None = None
        waiting = self._waiting
        try:
            while True:
                if waiting is not None:  # it waits already: on this first, then step it
                    yielded, waiting = waiting, None
                    yielded._asyncio_future_blocking = True  # pyright: ignore[reportAttributeAccessIssue]
                else:
                    try:
                        yielded = coro.send(value) if error is None else coro.throw(error)
                    except StopIteration as stop:
                        return stop.value
                value, error = None, None
                if grace is None and self.swallowed:
                    loop = asyncio.get_running_loop()
                    grace = loop.call_later(GRACE, self._give_up)
                if yielded is None or not getattr(yielded, "_asyncio_future_blocking", False):
                    try:  # a bare yield (sleep(0)), or something the task will refuse
                        value = yield yielded
                    except BaseException as exc:
                        error = self._delivered(exc)
                    if self.abandoned:
                        return self._hand_over(None)
                    continue
                target: asyncio.Future[Any] = yielded
                target._asyncio_future_blocking = False  # pyright: ignore[reportAttributeAccessIssue]
                proxy: asyncio.Future[None] = target.get_loop().create_future()
                forward = partial(_forward, proxy)
                target.add_done_callback(forward)
                self._proxy = proxy
                try:
                    proxy._asyncio_future_blocking = True  # pyright: ignore[reportAttributeAccessIssue]
                    yield proxy
                except BaseException as exc:
                    target.remove_done_callback(forward)
                    if isinstance(exc, asyncio.CancelledError) and target.cancel(
                        exc.args[0] if exc.args else None  # its message: who cancelled
                    ):
                        self._delivered(exc)  # it sees its own future cancelled, as usual
                    else:
                        error = self._delivered(exc)
                    continue
                finally:
                    self._proxy = None
                if self.abandoned:
                    target.remove_done_callback(forward)
                    return self._hand_over(target)
        finally:
            if grace is not None:
                grace.cancel()

    def _delivered(self, exc: BaseException) -> BaseException:
        """A cancellation of ours goes to the coroutine: from now on it may not stop.

        Only the run's own (a timeout, ``cancel()``) start the grace: a library's own cancel
        scope (anyio's, in an HTTP client) cancels the task too, and handles it.
        """
        if isinstance(exc, asyncio.CancelledError) and self._ours():
            self.swallowed = True  # until it shows otherwise (by raising it)
        return exc

    def _give_up(self) -> None:
        self.abandoned = True
        proxy = self._proxy
        if proxy is not None and not proxy.done():
            proxy.set_result(None)

    def _hand_over(
        self, waiting: asyncio.Future[Any] | None
    ) -> tuple[ToolResult | None, str | None]:
        task = asyncio.get_running_loop().create_task(_resumed(self._coro, waiting))
        abandon(task, self._tool, self._run_id)
        return None, ABANDONED


def _forward(proxy: asyncio.Future[None], _: object) -> None:
    if not proxy.done():
        proxy.set_result(None)


async def _resumed(coro: Coroutine[Any, Any, Any], waiting: asyncio.Future[Any] | None) -> Any:
    """An abandoned call, going on in a task of its own (nobody cancels it again)."""
    return await Drive(coro, _never, _NOBODY, "", waiting=waiting)


def _never() -> bool:
    return False


async def bounded(
    work: Coroutine[Any, Any, tuple[ToolResult, str | None]],
    timeout: float | None,
    tool: Tool,
    run_id: str = "",
    turn: Turn | None = None,
    watch: Call | None = None,
) -> tuple[ToolResult, str | None]:
    """Run ``work`` in a task of its own within ``timeout`` (outside the run's own task).

    Past the timeout it is cancelled; a call that has not stopped ``GRACE`` seconds later is
    abandoned and reported as ``ABANDONED``. If the caller is cancelled meanwhile, so is the
    call (abandoned if it will not stop) and the cancellation propagates. ``turn`` tells a
    call that never got its concurrency slot from one that ran too long.
    """
    task = asyncio.get_running_loop().create_task(work)
    if watch is not None:
        monitor.begin(task, watch)
    try:
        try:
            if await settle_within(task, timeout):
                return task.result()
        except asyncio.CancelledError:
            task.cancel()
            if not task.done():
                abandon(task, tool, run_id)
            raise
        task.cancel()
        assert timeout is not None
        if await settle_within(task, GRACE):
            if turn is not None and not turn.started:
                return no_turn(tool, timeout), "timeout"
            if tool.runs_as != "thread":  # (a thread's await ends; the thread runs on)
                return timed_out(tool.name, timeout), "timeout"
        else:
            abandon(task, tool, run_id)
        return ToolResult.error(abandoned_text(tool, timeout)), ABANDONED
    finally:
        if watch is not None:
            monitor.end(task)


_SLOTS: WeakKeyDictionary[
    Policy, WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
] = WeakKeyDictionary()


def slot_for(policy: Policy, tool: str, cap: int) -> asyncio.Semaphore:
    """The semaphore capping ``tool``'s concurrent calls under ``policy`` on this event loop."""
    loop = asyncio.get_running_loop()
    per_loop = _SLOTS.setdefault(policy, WeakKeyDictionary())
    slots = per_loop.setdefault(loop, {})
    semaphore = slots.get(tool)
    if semaphore is None:
        semaphore = slots[tool] = asyncio.Semaphore(cap)
    return semaphore
