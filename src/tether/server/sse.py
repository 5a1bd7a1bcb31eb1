"""A run's events as Server-Sent Events, read from the store.

Each event goes out as ``id: <seq>``, ``event: <kind>``, ``data: <its JSON>``. A client that
reconnects with ``Last-Event-ID: <seq>`` gets the events after that seq: no gap, no
duplicate. The stream ends when the run is not executing and has no event left to send
(it ended, or waits for a human: reconnect once it goes on), or, for a run executing in
another process (or left running by a dead one), after 60 s without an event; a comment
line every 15 s keeps proxies from closing a quiet stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from tether.codec import encode_event
from tether.events import Event
from tether.server.runs import ServerRuns
from tether.stores.base import RunStore

__all__ = ["PAGE", "Allowed", "event_stream"]

PAGE = 100
"""Events read from the store at a time (a stream, or a log, holds at most one page)."""

_KEEPALIVE_S = 15.0
_KEY_CHECK_S = 15.0  # how often a stream asks whether its key is still live (events or not)
_ELSEWHERE_POLL_S = 1.0  # a run another process executes: how often to look
_ELSEWHERE_QUIET_S = 60.0  # and how long a stream of it may see nothing before it ends


def _sse(event: Event) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event.seq,
        event.kind.encode(),
        encode_event(event),
    )


Allowed = Callable[[], Awaitable[bool]]
"""Whether the stream's key is still allowed (a revoked key's streams end)."""


class _Cursor:
    """The seq of the last event sent, and whether the key was found revoked."""

    def __init__(self, last: int, allowed: Allowed) -> None:
        self.last = last
        self.refused = False
        self._allowed = allowed
        self._checked = time.monotonic()

    async def allowed(self, *, now: bool = False) -> bool:
        """Whether the key is still live, asked every ``_KEY_CHECK_S`` (``now``: at once).

        Asked before events go out as well as in quiet times: a run that commits more
        often than every keep-alive would otherwise be followed with a revoked key forever.
        """
        if not self.refused and (now or time.monotonic() - self._checked >= _KEY_CHECK_S):
            self._checked = time.monotonic()
            self.refused = not await self._allowed()
        return not self.refused


async def _live(queue: asyncio.Queue[Event | None], at: _Cursor) -> AsyncIterator[bytes]:
    """The events a run executing here commits, until it stops (or this reader falls behind).

    What is queued when the reader gets its turn goes out as one chunk: one write for the
    events of a commit, not one each.
    """
    while True:
        if queue.empty():
            try:
                event = await asyncio.wait_for(queue.get(), _KEEPALIVE_S)
            except TimeoutError:
                if not await at.allowed(now=True):
                    return
                yield b": keep-alive\n\n"
                continue
        else:
            event = queue.get_nowait()
        chunk: list[bytes] = []
        while event is not None:
            if event.seq > at.last:  # else: read from the store already
                chunk.append(_sse(event))
                at.last = event.seq
            if queue.empty():
                break
            event = queue.get_nowait()
        if chunk:
            if not await at.allowed():
                return
            yield b"".join(chunk)
        if event is None:
            return  # it stopped executing here (or this reader fell behind): read the store


async def _stored(store: RunStore, run_id: str, at: _Cursor) -> AsyncIterator[bytes]:
    """The stored events after ``at.last``, a page at a time (one chunk each), to the last.

    A long run is never held whole: the next page is read once this one has gone out.
    """
    while True:
        events = await store.read_page(run_id, after_seq=at.last, limit=PAGE)
        if not events or not await at.allowed():
            return
        yield b"".join(_sse(event) for event in events)
        at.last = events[-1].seq
        if len(events) < PAGE:
            return


async def event_stream(
    store: RunStore, runs: ServerRuns, run_id: str, after: int, allowed: Allowed
) -> AsyncIterator[bytes]:
    """The SSE bytes of ``run_id``'s events after seq ``after``, live until it stops.

    A run executing here is followed from memory (each event as its commit returns); what
    came before the stream, and a run executing elsewhere, is read from the store, ``PAGE``
    events at a time, each page sent as one chunk before the next is read.
    """
    at = _Cursor(after, allowed)
    quiet_since: float | None = None  # since when a run executing elsewhere sent nothing
    while True:
        changed = runs.changed(run_id)  # taken before reading: no commit slips between
        queue = runs.subscribe(run_id)  # likewise: what commits from now on is queued
        try:
            before = at.last
            async for chunk in _stored(store, run_id, at):
                yield chunk
            if at.refused:
                return
            read = at.last != before  # whether the store had anything new
            if queue is not None:
                async for chunk in _live(queue, at):
                    yield chunk
                if at.refused:
                    return
                continue
        finally:
            if queue is not None:
                runs.unsubscribe(run_id, queue)
        if read:
            quiet_since = None
            continue
        if (await store.info(run_id)).status != "running":
            return
        # executing in another process, or abandoned there: look again now and then, and
        # end a stream that has seen nothing for a while (reconnect with Last-Event-ID)
        now = time.monotonic()
        quiet_since = now if quiet_since is None else quiet_since
        if now - quiet_since > _ELSEWHERE_QUIET_S or not await at.allowed(now=True):
            return
        try:
            await asyncio.wait_for(changed.wait(), _ELSEWHERE_POLL_S)
        except TimeoutError:
            yield b": waiting\n\n"
