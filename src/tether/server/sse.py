"""A run's events as Server-Sent Events, read from the store.

Each event goes out as ``id: <seq>``, ``event: <kind>``, ``data: <its JSON>``. A client that
reconnects with ``Last-Event-ID: <seq>`` gets the events after that seq: no gap, no
duplicate. The stream ends when the run is not executing and has no event left to send
(it ended, or waits for a human: reconnect once it goes on); a comment line every 15 s
keeps proxies from closing a quiet stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tether.codec import encode_event
from tether.events import Event
from tether.server.runs import ServerRuns
from tether.stores.base import RunStore

__all__ = ["event_stream"]

_KEEPALIVE_S = 15.0
_ELSEWHERE_POLL_S = 1.0  # a run another process executes: how often to look


def _sse(event: Event) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event.seq,
        event.kind.encode(),
        encode_event(event),
    )


async def event_stream(
    store: RunStore, runs: ServerRuns, run_id: str, after: int
) -> AsyncIterator[bytes]:
    """The SSE bytes of ``run_id``'s events after seq ``after``, live until it stops.

    A run executing here is followed from memory (each event as its commit returns); what
    came before the stream, and a run executing elsewhere, is read from the store.
    """
    last = after
    while True:
        changed = runs.changed(run_id)  # taken before reading: no commit slips between
        queue = runs.subscribe(run_id)  # likewise: what commits from now on is queued
        try:
            events = await store.read(run_id, after_seq=last)
            for event in events:
                yield _sse(event)
                last = event.seq
            if queue is not None:
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), _KEEPALIVE_S)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    if event is None:
                        break  # it stopped executing here: the store has the rest
                    if event.seq <= last:
                        continue  # read from the store already
                    yield _sse(event)
                    last = event.seq
                continue
        finally:
            if queue is not None:
                runs.unsubscribe(run_id, queue)
        if events:
            continue
        info = await store.info(run_id)
        if info.status != "running":
            return
        # executing in another process (or abandoned there): look again now and then
        try:
            await asyncio.wait_for(changed.wait(), _ELSEWHERE_POLL_S)
        except TimeoutError:
            yield b": waiting\n\n"
