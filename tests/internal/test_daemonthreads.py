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
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
