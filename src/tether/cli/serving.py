"""How the servers serve HTTP: uvicorn's h11 protocol with a deadline on a request's head.

uvicorn times out idle keep-alive connections, but not a client that opens a connection
and sends its request line and headers a byte at a time: thousands of those hold every
file descriptor the process has, and the API stops answering (a slowloris). Here a
connection whose first request's head has not arrived within ``HEAD_SECONDS`` is closed;
a body that comes too slowly is the app's to refuse (``server.app``'s 408). Both ``tether
serve`` and ``tether mcp serve --http`` use it; uvicorn is imported by them, not here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

__all__ = ["HEAD_SECONDS", "MAX_CONNECTIONS", "HeadDeadlineProtocol", "serving"]

HEAD_SECONDS = 10.0
"""Seconds a new connection has to send its first request's line and headers."""

MAX_CONNECTIONS = 1000
"""Connections (and requests in flight) a server takes at once; beyond it, 503."""


class HeadDeadlineProtocol(H11Protocol):
    """h11, closing a connection that has not sent a whole request head in time."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection: its first request's head is due within ``HEAD_SECONDS``."""
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        """A response is sent: on a kept-alive connection the next head is due in time too.

        (uvicorn's keep-alive timeout ends when any byte arrives: a head sent a byte at a
        time kept the connection forever.)
        """
        super().on_response_complete()
        self._arm()

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        waiting = self.cycle  # the request answered last (None: none yet)
        self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_overdue, waiting)

    def _head_overdue(self, waiting: RequestResponseCycle | None) -> None:
        if (
            self.cycle is waiting  # no new head came since the timer was set,
            and (waiting is None or waiting.response_complete)  # nor is one being answered
            and not self.transport.is_closing()
        ):  # (a pipelined request answered at once has the cycle the timer saw)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: its deadline with it."""
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)


def serving() -> dict[str, Any]:
    """``uvicorn.run``'s options for both servers."""
    return {
        "log_level": "warning",
        # open event streams would hold shutdown forever: 3 s, then their runs end cancelled
        "timeout_graceful_shutdown": 3,
        "http": HeadDeadlineProtocol,
        "limit_concurrency": MAX_CONNECTIONS,
    }
