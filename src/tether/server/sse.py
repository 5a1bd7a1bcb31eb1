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
from tether.server.runs import ServerRuns
from tether.stores.base import RunStore

__all__ = ["event_stream"]

_KEEPALIVE_S = 15.0
_ELSEWHERE_POLL_S = 1.0  # a run another process executes: how often to look


async def event_stream(
    store: RunStore, runs: ServerRuns, run_id: str, after: int
) -> AsyncIterator[bytes]:
    """The SSE bytes of ``run_id``'s events after seq ``after``, live until it stops."""
    last = after
    while True:
        changed = runs.changed(run_id)  # taken before reading: no commit slips between
        events = await store.read(run_id, after_seq=last)
        for event in events:
            data = encode_event(event)
            yield b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.kind.encode(), data)
            last = event.seq
        if events:
            continue
        if not runs.is_active(run_id):
            info = await store.info(run_id)
            if info.status != "running":
                return
            # executing in another process (or abandoned there): look again now and then
            try:
                await asyncio.wait_for(changed.wait(), _ELSEWHERE_POLL_S)
            except TimeoutError:
                yield b": waiting\n\n"
            continue
        try:
            await asyncio.wait_for(changed.wait(), _KEEPALIVE_S)
        except TimeoutError:
            yield b": keep-alive\n\n"
