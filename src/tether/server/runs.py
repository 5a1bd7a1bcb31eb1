"""The runs a server executes on its event loop: bounded in number, woken on each commit."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tether.agent import Agent
from tether.errors import TetherError, UserError
from tether.events import Event
from tether.jsontypes import JsonObject
from tether.loop import AgentRun
from tether.policy.approvals import Approval
from tether.stores.base import RunInfo, RunStore

__all__ = ["ServerRuns", "TooBusy", "run_json"]

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


class ServerRuns:
    """The runs executing here, and the waiters of each run's next commit."""

    def __init__(self, store: RunStore, *, max_active: int) -> None:
        if max_active < 1:
            raise UserError(f"max_active_runs must be at least 1, not {max_active}")
        self._store = store
        self._max = max_active
        self._active: dict[str, tuple[AgentRun[Any], asyncio.Task[None]]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._feeds: dict[str, list[asyncio.Queue[Event | None]]] = {}

    def is_active(self, run_id: str) -> bool:
        """Whether the run executes in this server now."""
        return run_id in self._active

    def subscribe(self, run_id: str) -> asyncio.Queue[Event | None] | None:
        """A queue of the run's events as they are committed here, ``None`` ending it.

        ``None`` instead of a queue: the run does not execute here (read the store).
        """
        if run_id not in self._active:
            return None
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
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
        for queue in self._feeds.get(run_id, ()):
            queue.put_nowait(event)

    def changed(self, run_id: str) -> asyncio.Event:
        """An event set at the run's next commit (or when it stops executing here)."""
        event = self._changed.get(run_id)
        if event is None:
            event = self._changed[run_id] = asyncio.Event()
        return event

    def wake(self, run_id: str) -> None:
        """Wake whoever waits for ``run_id``'s next commit."""
        event = self._changed.pop(run_id, None)
        if event is not None:
            event.set()

    def _room(self, run_id: str | None) -> None:
        if run_id is not None and run_id in self._active:
            return
        if len(self._active) >= self._max:
            raise TooBusy(f"the server executes {self._max} runs, its limit: try again in a second")

    async def start(
        self,
        agent: Agent[Any],
        goal: str,
        *,
        run_id: str | None,
        context: Mapping[str, Any] | None,
        tags: Sequence[str],
    ) -> str:
        """Start a run (or, for a known ``run_id``, return it as it is); returns its id."""
        if run_id is not None and run_id in self._active:
            return run_id
        self._room(run_id)
        run = agent.stream(
            goal, run_id=run_id, context=context, tags=tags, store=self._store, sinks=()
        )
        return await self._execute(run)

    async def resume(
        self,
        agent: Agent[Any],
        run_id: str,
        *,
        answer: str | None = None,
        approvals: Sequence[Approval] = (),
    ) -> None:
        """Continue a stored run: with the user's answer, decisions, or after a crash."""
        if run_id in self._active:
            raise UserError("the run is executing in this server: there is nothing to continue")
        self._room(None)
        run = agent.resume_stream(run_id, answer=answer, approvals=approvals, store=self._store)
        await self._execute(run)

    async def cancel(self, run_id: str) -> None:
        """Cancel a run executing here, and wait until it has ended."""
        found = self._active.get(run_id)
        if found is None:
            raise UserError("the run is not executing in this server: nothing to cancel")
        run, task = found
        run.cancel("cancelled through the API")
        await asyncio.shield(task)

    async def _execute(self, run: AgentRun[Any]) -> str:
        """Drive ``run`` in a task of its own; returns once its first event is committed."""
        first = asyncio.get_running_loop().create_future()

        async def drive() -> None:
            run_id = ""
            try:
                async for event in run:  # each one committed already
                    run_id = event.run_id
                    if not first.done():
                        self._active[run_id] = (run, task)
                        first.set_result(run_id)
                    self._feed(run_id, event)
                    self.wake(run_id)
            except Exception as exc:
                if not first.done():
                    first.set_exception(exc)
                else:
                    _log.exception("run %s stopped with an error", run_id)
            finally:
                if run_id:
                    self._active.pop(run_id, None)
                    self._feed(run_id, None)
                    self.wake(run_id)
                if not first.done():  # a stored run that had ended yields nothing
                    first.set_result(run.outcome.run_id)

        task = asyncio.get_running_loop().create_task(drive())
        return await first

    async def close(self) -> None:
        """Cancel every run executing here and wait for them to end."""
        for run, _ in list(self._active.values()):
            run.cancel("the server is shutting down")
        tasks = [task for _, task in self._active.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
