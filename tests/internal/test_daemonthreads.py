"""tether's daemon threads for blocking calls: results, errors, reuse, and idle threads end."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from tether._internal.daemonthreads import in_daemon_thread


async def test_results_and_errors_come_back() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert await in_daemon_thread(add, 2, 3) == 5

    def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await in_daemon_thread(fails)


async def test_calls_run_at_once_on_daemon_threads() -> None:
    barrier = threading.Barrier(8, timeout=30)  # each call waits for all the others

    def meet() -> bool:
        barrier.wait()
        return threading.current_thread().daemon

    assert await asyncio.gather(*(in_daemon_thread(meet) for _ in range(8))) == [True] * 8


def says_ok(program: str) -> None:
    """Run ``program`` in a fresh interpreter (the pool's state its own): it prints ok."""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


_PROGRAM = """
import asyncio, threading, time
from tether._internal import daemonthreads
from tether._internal.daemonthreads import in_daemon_thread

daemonthreads.IDLE_SECONDS = 0.2

def ours():
    return [t for t in threading.enumerate() if t.name == "tether-blocking"]

async def main():
    first = await in_daemon_thread(threading.get_ident)
    second = await in_daemon_thread(threading.get_ident)
    assert first == second, "the idle thread did not take the next call"
    assert len(ours()) == 1
    deadline = time.monotonic() + 30
    while ours():
        assert time.monotonic() < deadline, "an idle thread never ended"
        await asyncio.sleep(0.05)
    assert await in_daemon_thread(lambda: 7) == 7  # a new one starts when none is idle
    print("ok")

asyncio.run(main())
"""


def test_an_idle_thread_is_reused_then_ends() -> None:
    says_ok(_PROGRAM)


_FULL = """
import asyncio, threading
from tether._internal import daemonthreads
from tether._internal.daemonthreads import in_daemon_thread

daemonthreads.MAX_BUSY = 2
gate = threading.Event()

async def main():
    calls = [asyncio.ensure_future(in_daemon_thread(gate.wait, 30)) for _ in range(5)]
    await asyncio.sleep(0.2)
    assert daemonthreads._threads == 2, daemonthreads._threads  # the rest wait their turn
    gate.set()
    assert await asyncio.gather(*calls) == [True] * 5
    await asyncio.sleep(0.2)
    # every thread idle again, none counted twice: the next calls find them
    assert (daemonthreads._idle, daemonthreads._waiting) == (2, 0)
    assert await asyncio.gather(*(in_daemon_thread(lambda: 1) for _ in range(2))) == [1, 1]
    print("ok")

asyncio.run(main())
"""


def test_past_max_busy_calls_wait_their_turn_and_the_count_stays_true() -> None:
    says_ok(_FULL)


_NO_THREAD = """
import asyncio, threading
from tether._internal import daemonthreads
from tether._internal.daemonthreads import in_daemon_thread

ran = []
start = threading.Thread.start
failed = []

def failing_once(self):
    if not failed and self.name == "tether-blocking":
        failed.append(True)
        raise RuntimeError("can't start new thread")
    return start(self)

threading.Thread.start = failing_once

async def main():
    try:
        await in_daemon_thread(ran.append, "told it failed")
    except RuntimeError:
        pass
    assert await in_daemon_thread(ran.append, "second") is None
    await asyncio.sleep(0.2)
    assert ran == ["second"], ran  # the call whose thread did not start never ran
    assert (daemonthreads._threads, daemonthreads._idle) == (1, 1)
    print("ok")

asyncio.run(main())
"""


def test_a_thread_that_fails_to_start_leaves_no_call_behind() -> None:
    # before: the caller was told it failed, yet its call ran later, and the pool counted
    # an idle thread too many (later calls waited behind a busy one)
    says_ok(_NO_THREAD)
