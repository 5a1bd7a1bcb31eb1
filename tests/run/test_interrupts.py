"""How a run's awaits are interrupted: ``Interrupts.settle`` and ``unwind`` on a real task."""

from __future__ import annotations

import asyncio

import pytest

from tether.run.base import Cancelled
from tether.run.interrupts import Interrupts


async def _await_on(interrupts: Interrupts, awaitable: asyncio.Future[None]) -> str:
    """Await ``awaitable`` as a run's await does, and say how ``unwind`` left it."""
    interrupts.begin(None)
    try:
        await awaitable
    except asyncio.CancelledError as exc:
        return interrupts.unwind(exc)
    finally:
        interrupts.end()
    return "done"


async def _bound_task(interrupts: Interrupts, awaitable: asyncio.Future[None]) -> asyncio.Task[str]:
    task = asyncio.create_task(_await_on(interrupts, awaitable))
    interrupts.bind(task)
    await asyncio.sleep(0)  # the task is at its await now
    return task


async def test_the_runs_own_cancel_unwinds_as_cancelled() -> None:
    interrupts = Interrupts()
    task = await _bound_task(interrupts, asyncio.get_running_loop().create_future())
    interrupts.request("stop it")
    with pytest.raises(Cancelled):
        await task
    assert interrupts.reason == "stop it"
    assert interrupts.requests == 0  # settled: withdrawn from the task
    interrupts.close()


async def test_the_owners_cancel_propagates_as_the_same_error() -> None:
    interrupts = Interrupts()
    task = await _bound_task(interrupts, asyncio.get_running_loop().create_future())
    task.cancel("the owner's")
    with pytest.raises(asyncio.CancelledError, match="the owner's"):
        await task
    interrupts.close()


async def test_a_deadline_is_left_to_the_await() -> None:
    interrupts = Interrupts()
    loop = asyncio.get_running_loop()

    async def bounded() -> str:
        interrupts.begin(0.01)
        try:
            await loop.create_future()
        except asyncio.CancelledError as exc:
            return interrupts.unwind(exc)
        finally:
            interrupts.end()
        return "done"

    task = asyncio.create_task(bounded())
    interrupts.bind(task)
    assert await task == "timeout"
    assert task.cancelling() == 0  # the watchdog's cancellation was withdrawn
    interrupts.close()


async def test_a_cancelled_error_the_awaited_code_raised_itself_is_the_tools() -> None:
    interrupts = Interrupts()
    failing = asyncio.get_running_loop().create_future()
    task = await _bound_task(interrupts, failing)
    failing.set_exception(asyncio.CancelledError("raised by the tool"))
    assert await task == "tool"
    interrupts.close()


async def test_ctrl_c_marks_the_run_interrupted() -> None:
    interrupts = Interrupts()
    interrupts.interrupt("interrupted by KeyboardInterrupt in tool 'x'")
    assert interrupts.interrupted
    assert interrupts.reason == "interrupted by KeyboardInterrupt in tool 'x'"
