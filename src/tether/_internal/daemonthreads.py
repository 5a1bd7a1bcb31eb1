"""Blocking calls on tether's own daemon threads, never on the event loop's default executor.

A blocking tool that will not stop in time is abandoned: the run records it and goes on,
but its thread keeps running. On the loop's default executor that thread is joined when
``asyncio.run`` closes the loop (``shutdown_default_executor``) and again when the
interpreter exits: ``agent.run_sync`` with a 1-s tool timeout returned only when the tool's
``time.sleep(3600)`` did, and six stuck calls (the default executor's size on two cores)
left every later blocking tool of the process queued behind them. Here a call gets an idle
daemon thread or a new one (up to ``MAX_BUSY`` busy at once; past that, calls wait their
turn, within their timeouts): nothing waits for an abandoned call, and the process exits
while one still runs (the log says its outcome is unknown).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

__all__ = ["IDLE_SECONDS", "MAX_BUSY", "in_daemon_thread"]

T = TypeVar("T")

MAX_BUSY = 256
"""Threads running calls at once (a thread is busy from its call's start to its end)."""

IDLE_SECONDS = 60.0
"""An idle thread waits this long for another call before it ends."""

_Work = tuple[Future[Any], Callable[[], Any]]

_lock = threading.Lock()
_work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
_idle = 0  # threads waiting for work, less the calls already handed to them
_threads = 0  # threads alive
_waiting = 0  # calls queued with no thread for them (``MAX_BUSY`` busy): the next free takes one


def _worker(first: _Work) -> None:
    global _idle, _threads, _waiting
    future, call = first  # the call this thread was started for
    while True:
        if future.set_running_or_notify_cancel():
            try:
                result = call()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
        del future, call  # (a result is not kept alive by an idle thread)
        with _lock:
            if _waiting > 0:  # a queued call has this thread's name on it: not idle
                _waiting -= 1
            else:
                _idle += 1
        while True:
            try:
                future, call = _work.get(timeout=IDLE_SECONDS)
                break
            except queue.Empty:
                with _lock:
                    if _idle > 0:  # nobody counts on this thread: it ends
                        _idle -= 1
                        _threads -= 1
                        return
                # a call was handed to the idle threads just now: take it


def _submit(call: Callable[[], Any]) -> Future[Any]:
    global _idle, _threads, _waiting
    future: Future[Any] = Future()
    with _lock:
        if _idle > 0:
            _idle -= 1
            start = False
        else:
            start = _threads < MAX_BUSY
            if start:
                _threads += 1
            else:
                _waiting += 1
    if not start:
        _work.put((future, call))  # an idle thread's, or the next to free (``_waiting``)
        return future
    try:  # its first call goes with it: a thread that fails to start leaves nothing queued
        thread = threading.Thread(
            target=_worker, args=((future, call),), name="tether-blocking", daemon=True
        )
        thread.start()
    except BaseException:
        with _lock:
            _threads -= 1
        raise
    return future


async def in_daemon_thread(func: Callable[..., T], /, *args: Any) -> T:
    """``asyncio.to_thread(func, *args)``, on a daemon thread nothing waits for at exit.

    The caller's context variables are seen by ``func``, as with ``asyncio.to_thread``.
    Cancelling the await leaves a started call running, as ``to_thread`` does.
    """
    context = contextvars.copy_context()
    future = _submit(partial(context.run, func, *args))
    return await asyncio.wrap_future(future)
