"""Hooks: your code, called with each committed event of a run, by kind.

    from tether import Agent, Hooks
    from tether.events import RunFinished, ToolCallFinished

    hooks = Hooks()

    @hooks.on(ToolCallFinished)
    def count(event: ToolCallFinished) -> None:
        metrics.increment(f"tool.{event.tool}", error=event.is_error)

    @hooks.on(RunFinished)
    async def notify(event: RunFinished) -> None:
        await chat.post(f"run {event.run_id} ended {event.status}")

    agent = Agent(..., hooks=hooks)

A hook sees an event once it is committed (stored, when the run has a store), in the log's
order, before the run goes on; handlers of one event run in the order they were added, then
those added with ``every``. A hook never changes the run: one that raises is reported in
the outcome's warnings (and to the ``tether`` logger), one that is async and runs past
``timeout`` is cancelled, reported the same way and not called again in that run, and the
run goes on either way. The run waits for its hooks, so a slow hook delays it (``cancel()``
included) by at most one ``timeout`` per hook. A sync hook runs on the event loop: keep it
short, or make it async.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from tether._internal.leftbehind import leave_behind
from tether.codec import decode_event, encode_event
from tether.errors import ConfigError
from tether.events import Event, EventBase
from tether.sinks import EventSink

__all__ = ["Handler", "HookSink", "Hooks"]

E = TypeVar("E", bound=EventBase)

Handler = Callable[[E], Awaitable[None] | None]
"""A hook: takes one event (of the kind it is added for); sync, or async."""

_log = logging.getLogger("tether")


class Hooks:
    """Handlers of a run's committed events, by kind (see the module docstring)."""

    __slots__ = ("_by_kind", "_every", "timeout")

    def __init__(self, *, timeout: float = 10.0) -> None:
        """``timeout``: the seconds an async hook may take on one event before it is cancelled."""
        given = cast(object, timeout)  # callers without a type checker pass anything
        if isinstance(given, bool) or not isinstance(given, int | float) or not given > 0:
            raise ConfigError(
                f"Hooks(timeout=...) must be a positive number of seconds, not {timeout!r}"
            )
        self.timeout = timeout
        self._by_kind: dict[type[Any], list[Handler[Any]]] = {}
        self._every: list[Handler[Any]] = []

    def on(self, kind: type[E]) -> Callable[[Handler[E]], Handler[E]]:
        """Decorate a handler of events of ``kind`` (an event class of ``tether.events``).

        Raises:
            ConfigError: ``kind`` is not a kind of event.
        """
        given = cast(object, kind)  # callers without a type checker pass anything
        if not (isinstance(given, type) and issubclass(given, EventBase)) or given is EventBase:
            raise ConfigError(
                f"hooks.on() takes an event class from tether.events (ToolCallFinished, "
                f"RunFinished, ...), not {kind!r}; use hooks.every for every event"
            )

        def add(handler: Handler[E]) -> Handler[E]:
            self._by_kind.setdefault(kind, []).append(handler)
            return handler

        return add

    def every(self, handler: Handler[Event]) -> Handler[Event]:
        """Decorate a handler of every event."""
        self._every.append(handler)
        return handler

    def handlers(self, event: Event) -> list[Handler[Any]]:
        """The handlers of ``event``, in the order they run."""
        own = self._by_kind.get(type(event))
        return [*own, *self._every] if own else self._every

    def __bool__(self) -> bool:
        return bool(self._by_kind or self._every)


class HookSink(EventSink):
    """Calls a run's hooks with each committed batch (a sink that never fails the run)."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self._warnings: list[str] = []
        self._failed: set[int] = set()  # handlers reported already: once each per run
        self._stuck: set[int] = set()  # handlers that ran past the timeout: not called again

    async def write(self, events: Sequence[Event]) -> None:
        """Call each event's handlers in turn; what fails is reported, never raised.

        Each handler gets a copy of the event (made from its encoding): an event's nested
        values (a call's arguments) are shared with the run, and a hook that changed them
        changed the log's events after they were sealed.
        """
        for committed in events:
            handlers = self.hooks.handlers(committed)
            if not handlers:
                continue
            for handler in handlers:
                if self._stuck and id(handler) in self._stuck:
                    continue
                event = decode_event(encode_event(committed))
                try:
                    result = handler(event)
                except Exception as exc:
                    self._report(handler, event, f"raised {type(exc).__name__}: {exc}")
                    continue
                if inspect.isawaitable(result):
                    await self._settle(handler, event, result)

    async def _settle(self, handler: Handler[Any], event: Event, result: Awaitable[Any]) -> None:
        """Await an async hook up to the timeout; past it, it is cancelled and left behind."""
        timeout = self.hooks.timeout
        task = asyncio.ensure_future(result)
        try:
            done, _ = await asyncio.wait((task,), timeout=timeout)
        finally:
            if not task.done():  # past its time, or the run itself was cancelled meanwhile
                task.cancel()  # not awaited: a hook that ignores it cannot hold the run,
                # nor the program's exit (asyncio.run awaits its tasks)
                name = getattr(handler, "__qualname__", None) or repr(handler)
                leave_behind(task, f"the hook {name}, cancelled past its timeout,")
        if not done:
            self._stuck.add(id(handler))  # one wait per run: it must not stall every commit
            self._report(
                handler,
                event,
                f"took longer than {timeout:g} s and was cancelled (it is not called again "
                "in this run)",
            )
        elif task.cancelled():
            self._report(handler, event, "was cancelled")
        elif (exc := task.exception()) is not None:
            self._report(handler, event, f"raised {type(exc).__name__}: {exc}")

    def _report(self, handler: Handler[Any], event: Event, what: str) -> None:
        name = getattr(handler, "__qualname__", None) or repr(handler)
        message = (
            f"the hook {name} {what} on {event.kind} (seq {event.seq}); the run went on without it"
        )
        _log.warning("tether: %s", message)
        if id(handler) not in self._failed:  # the outcome says it once; the logger each time
            self._failed.add(id(handler))
            self._warnings.append(message)

    def take_warnings(self) -> list[str]:
        """The hooks' failures since the last commit (the first of each hook)."""
        notes, self._warnings = self._warnings, []
        return notes
