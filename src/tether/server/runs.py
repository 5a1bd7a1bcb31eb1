"""The runs a server executes on its event loop: bounded in number, woken on each commit."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from tether.agent import Agent
from tether.errors import LeaseHeld, RunExists, RunNotFound, TetherError, UserError
from tether.events import Event
from tether.jsontypes import JsonObject
from tether.loop import AgentRun
from tether.policy.approvals import Approval
from tether.stores.base import RunInfo, RunStore

__all__ = ["Busy", "ServerRuns", "TooBusy", "run_json"]

_log = logging.getLogger("tether.server")


class TooBusy(TetherError):
    """The server executes as many runs as it may: try again shortly (HTTP 429)."""


def run_json(info: RunInfo, hidden_prefix: str) -> JsonObject:
    """A run's row as the API shows it (the server's own tags left out)."""
    return {
        "run_id": info.run_id,
        "agent": info.agent,
        "goal": info.goal,
        "status": info.status,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "steps": info.steps,
        "events": info.events,
        "usage": {
            "input_tokens": info.usage.input_tokens,
            "output_tokens": info.usage.output_tokens,
            "requests": info.usage.requests,
            "cost": info.usage.cost,
        },
        "parent_run_id": info.parent_run_id,
        "tags": [t for t in info.tags if not t.startswith(hidden_prefix)],
    }


_FEED_SIZE = 1000  # events queued for one stream; past it, the stream reads the store again


class Busy(TetherError):
    """The run is being started, resumed or executed by another request here (HTTP 409)."""


class ServerRuns:
    """The runs executing here, the slots they hold, and the streams that follow them."""

    def __init__(self, store: RunStore, *, max_active: int) -> None:
        if max_active < 1:
            raise UserError(f"max_active_runs must be at least 1, not {max_active}")
        self._store = store
        self._max = max_active
        self._slots = 0  # runs executing or being started here
        self._active: dict[str, tuple[AgentRun[Any], asyncio.Task[None]]] = {}
        self._starting: dict[str, asyncio.Future[str]] = {}
        self._driving: dict[AgentRun[Any], asyncio.Task[None]] = {}
        """Every run driven here, from before its first event (``close`` stops them all)."""
        self._changed: weakref.WeakValueDictionary[str, asyncio.Event] = (
            weakref.WeakValueDictionary()
        )
        self._feeds: dict[str, list[asyncio.Queue[Event | None]]] = {}

    def is_active(self, run_id: str) -> bool:
        """Whether the run executes (or is being started) in this server now."""
        return run_id in self._active or run_id in self._starting

    def subscribe(self, run_id: str) -> asyncio.Queue[Event | None] | None:
        """A queue of the run's events as they are committed here, ``None`` ending it.

        ``None`` instead of a queue: the run does not execute here (read the store). A
        stream that falls ``_FEED_SIZE`` events behind gets ``None`` too, and reads the
        store from where it is.
        """
        if run_id not in self._active:
            return None
        queue: asyncio.Queue[Event | None] = asyncio.Queue(_FEED_SIZE)
        self._feeds.setdefault(run_id, []).append(queue)
        return queue

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[Event | None]) -> None:
        """Stop feeding ``queue``."""
        feeds = self._feeds.get(run_id)
        if feeds is not None and queue in feeds:
            feeds.remove(queue)
            if not feeds:
                del self._feeds[run_id]

    def _feed(self, run_id: str, event: Event | None) -> None:
        for queue in list(self._feeds.get(run_id, ())):
            if event is not None and queue.qsize() >= _FEED_SIZE - 1:
                self.unsubscribe(run_id, queue)  # a slow reader: back to the store
                event = None
            queue.put_nowait(event)

    def changed(self, run_id: str) -> asyncio.Event:
        """An event set at the run's next commit (or when it stops executing here)."""
        event = self._changed.get(run_id)
        if event is None:
            event = asyncio.Event()
            self._changed[run_id] = event
        return event

    def wake(self, run_id: str) -> None:
        """Wake whoever waits for ``run_id``'s next commit."""
        event = self._changed.pop(run_id, None)
        if event is not None:
            event.set()

    def _reserve(self) -> None:
        if self._slots >= self._max:
            raise TooBusy(f"the server executes {self._max} runs, its limit: try again in a second")
        self._slots += 1

    async def start(
        self,
        agent: Agent[Any],
        goal: str,
        *,
        run_id: str | None,
        context: Mapping[str, Any] | None,
        tags: Sequence[str],
    ) -> str:
        """Start a run; for a ``run_id`` stored already, return it as it is (same goal)."""
        if run_id is None:
            return await self._execute(
                agent.stream(goal, context=context, tags=tags, store=self._store), None
            )
        pending = self._starting.get(run_id)
        if pending is not None:  # the same key, twice at once: one run
            found = await asyncio.shield(pending)
            _same_request(await self._store.info(found), agent.name, goal, tags)
            return found
        if run_id in self._active:
            _same_request(await self._store.info(run_id), agent.name, goal, tags)
            return run_id
        claim: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._starting[run_id] = claim  # before any await: a second request waits on it
        try:
            try:
                info = await self._store.info(run_id)
            except RunNotFound:
                info = None
            if info is not None:
                _same_request(info, agent.name, goal, tags)
            if info is not None and info.status != "running":
                claim.set_result(run_id)  # stored as it ended (or waits): itself
                return run_id
            run = agent.stream(
                goal, run_id=run_id, context=context, tags=tags, store=self._store, sinks=()
            )
            return await self._execute(run, run_id, claim)
        except BaseException as exc:
            if not claim.done():
                claim.set_exception(exc)
                claim.exception()  # retrieved: the waiters, if any, raise it
            raise
        finally:
            if claim.done() and self._starting.get(run_id) is claim:
                del self._starting[run_id]

    async def resume(
        self,
        agent: Agent[Any],
        run_id: str,
        *,
        answer: str | None = None,
        approvals: Sequence[Approval] = (),
    ) -> None:
        """Continue a stored run: with the user's answer, decisions, or after a crash."""
        if self.is_active(run_id):
            raise Busy("the run is executing in this server: there is nothing to continue")
        run = agent.resume_stream(run_id, answer=answer, approvals=approvals, store=self._store)
        await self._execute(run, run_id)

    async def cancel(self, run_id: str) -> None:
        """Cancel a run executing here, and wait until it has ended."""
        found = self._active.get(run_id)
        if found is None and run_id in self._starting:  # (not yet executing: not the client's)
            raise Busy("the run is starting in this server: cancel it again in a moment")
        if found is None:
            raise UserError("the run is not executing in this server: nothing to cancel")
        run, task = found
        run.cancel("cancelled through the API")
        await asyncio.shield(task)

    async def _execute(
        self,
        run: AgentRun[Any],
        run_id: str | None,
        first: asyncio.Future[str] | None = None,
    ) -> str:
        """Drive ``run`` in a task of its own; returns once its first event is committed.

        It holds a slot from now until it stops; a second request for the same run id
        while it starts waits for it (``start``) or is ``Busy`` (``resume``).
        """
        self._reserve()
        if first is None:
            first = asyncio.get_running_loop().create_future()
        if run_id is not None:
            self._starting[run_id] = first

        async def drive() -> None:
            started = ""
            try:
                async for event in run:  # each one committed already
                    started = event.run_id
                    if not first.done():
                        self._active[started] = (run, task)
                        first.set_result(started)
                    self._feed(started, event)
                    self.wake(started)
            except LeaseHeld:
                if not first.done():  # another process executes it
                    first.set_exception(Busy("the run is executing in another process"))
            except Exception as exc:
                if not first.done():
                    first.set_exception(exc)
                else:
                    _log.exception("run %s stopped with an error", started)
            finally:
                self._release(run_id, started, first)
                if not first.done():  # a stored run that had ended yields nothing
                    _settle(first, run)

        task = asyncio.get_running_loop().create_task(drive())
        self._driving[run] = task
        task.add_done_callback(lambda _: self._driving.pop(run, None))
        return await asyncio.shield(first)

    def _release(self, run_id: str | None, started: str, first: asyncio.Future[str]) -> None:
        """A run stopped executing here: its slot, its place, its streams."""
        self._slots -= 1
        if run_id is not None and self._starting.get(run_id) is first:
            del self._starting[run_id]
        if started:
            self._active.pop(started, None)
            self._feed(started, None)
            self.wake(started)

    async def close(self) -> None:
        """Stop every run executing here as a crash would, and wait for them to stop.

        Each is left ``running``, its lease given back (``AgentRun.detach``): the next server
        on this store resumes it (``resume_stale``), as after a crash. Cancelled, a rolling
        restart ended every run in flight for good.
        """
        for run in list(self._driving):  # also those still starting (no event yet)
            run.detach("the server is shutting down")
        tasks = list(self._driving.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _settle(first: asyncio.Future[str], run: AgentRun[Any]) -> None:
    """The id of a run that committed nothing new (it had ended), or why there is none."""
    try:
        first.set_result(run.outcome.run_id)
    except RuntimeError as exc:
        first.set_exception(exc)


def _same_request(info: RunInfo, agent: str, goal: str, tags: Sequence[str]) -> None:
    """A run started under an ``Idempotency-Key`` is answered again only for the same request.

    Raises:
        RunExists: it was started for another agent, goal or tags (its context is not
            compared: the index does not hold it).
    """
    differs = [
        what
        for what, same in (
            ("agent", info.agent == agent),
            ("goal", info.goal == goal),
            ("tags", set(tags) == set(info.tags)),
        )
        if not same
    ]
    if differs:
        raise RunExists(
            f"run {info.run_id!r} was started with this Idempotency-Key for another "
            f"{' and '.join(differs)}: a key names one request. Use a new key for a new run",
            run_id=info.run_id,
        )
