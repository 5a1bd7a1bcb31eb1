"""The thread that owns a SQLite store's connection: no SQLite call runs on an event loop.

SQLite waits for locks by sleeping in the calling thread (up to the busy timeout), so a
store used from the event loop's thread would freeze every run of the process while
another process holds the file. Here one daemon thread per store makes every call, in the
order they are submitted; the event loop awaits their results. Between jobs the thread runs
the store's periodic work (``tick``: applying pending records, renewing leases), whose
return value says when it is next due; it is given a way to the connection, which it opens
only if it has work to do.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["Worker"]

T = TypeVar("T")

_log = logging.getLogger("tether.stores")

_Job = tuple[Callable[[Any], Any], "Future[Any]", bool]


class Worker:
    """Runs jobs on one connection in one thread; opened lazily by the first job."""

    def __init__(
        self,
        name: str,
        opener: Callable[[], sqlite3.Connection],
        tick: Callable[[Callable[[], sqlite3.Connection]], float | None],
    ) -> None:
        self._name = name
        self._opener = opener
        self._tick = tick
        self._cond = threading.Condition(threading.Lock())
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._kicked = False
        self._db: sqlite3.Connection | None = None

    @property
    def started(self) -> bool:
        """Whether the thread was started (by a first job)."""
        return self._thread is not None

    @property
    def in_worker(self) -> bool:
        """Whether the caller runs on this worker's thread."""
        return threading.current_thread() is self._thread

    def submit(self, job: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Queue ``job``; its result (or exception) arrives in the returned future."""
        return self._submit(job, opening=True)

    def _submit(self, job: Callable[[Any], T], *, opening: bool) -> Future[T]:
        done: Future[T] = Future()
        with self._cond:
            if self._stopping:
                raise RuntimeError("the store is closed")
            self._jobs.append((job, done, opening))
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
        return done

    async def run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` on the thread and await its result."""
        return await asyncio.wrap_future(self.submit(job))

    async def run_if_open(self, job: Callable[[sqlite3.Connection | None], T]) -> T:
        """Run ``job`` on the thread with the connection, or ``None`` if it is not open."""
        return await asyncio.wrap_future(self._submit(job, opening=False))

    def wake(self) -> None:
        """Run the periodic work again now (something became due sooner)."""
        with self._cond:
            if self._thread is not None:
                self._kicked = True
                self._cond.notify()

    def stop(self) -> None:
        """Finish the queued jobs, close the connection and end the thread."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _main(self) -> None:
        next_tick: float | None = None
        while True:
            with self._cond:
                while not self._jobs and not self._stopping and not self._kicked:
                    wait = None if next_tick is None else next_tick - time.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                self._kicked = False
                job = self._jobs.popleft() if self._jobs else None
                stopping = self._stopping and job is None
            if stopping:
                break
            if job is not None:
                self._run(*job)
            try:
                delay = self._tick(self._connection)
            except Exception as exc:  # the store reports it where it matters; retry later
                _log.warning("tether: the SQLite store's periodic work failed: %s", exc)
                delay = 1.0
            next_tick = None if delay is None else time.monotonic() + delay
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connection(self) -> sqlite3.Connection:
        """The connection, opened now if it is not yet (periodic work with work to do)."""
        if self._db is None:
            self._db = self._opener()
        return self._db

    def _run(self, job: Callable[[Any], Any], done: Future[Any], opening: bool) -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            if self._db is None and opening:
                self._db = self._opener()
            result = job(self._db)
        except BaseException as exc:  # delivered to the awaiting caller
            done.set_exception(exc)
        else:
            done.set_result(result)
