"""Blocking (sync) tools run on tether's own daemon threads: an abandoned one holds nothing up.

A blocking call past its timeout is abandoned and its thread keeps running. On the event
loop's default executor, ``asyncio.run`` (so ``agent.run_sync``) waited for that thread
when it closed the loop, the interpreter waited for it at exit, and a handful of stuck
calls (the default executor's size) left every later blocking tool queued behind them.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from pathlib import Path

from tests.support import assert_protocol_valid
from tether import Agent, Limits, RulePolicy, allow, tool
from tether.content import TextBlock
from tether.events import ToolCallFinished, ToolCallUnknown
from tether.outcome import RunOutcome
from tether.testing import ScriptedModel, call, finish

POLICY = RulePolicy(None, allow(["*"], reason="the tests' own tools"))
DEADLINE = 60.0
"""Seconds a test waits before it calls a run hung (it would be until the tool returns)."""

release = threading.Event()
"""Set at the end of each test: the stuck threads then end (the test leaves none behind)."""


@tool(open_world=False, timeout=1)
def stuck(n: int) -> str:
    """Blocks until the test releases it (a side effect that will not come back).

    Args:
        n: Which call.
    """
    release.wait(DEADLINE * 2)
    return "late"


@tool(read_only=True, open_world=False)
def quick(n: int) -> int:
    """Answers at once.

    Args:
        n: A number.
    """
    return n + 1


def test_run_sync_returns_when_a_blocking_call_is_abandoned() -> None:
    agent = Agent(
        model=ScriptedModel([call("stuck", n=1), finish("gave up")]),
        tools=[stuck],
        limits=Limits(max_seconds=30),
        policy=POLICY,
    )
    box: list[object] = []
    runner = threading.Thread(target=lambda: box.append(agent.run_sync("go")), daemon=True)
    started = time.monotonic()
    try:
        runner.start()
        runner.join(DEADLINE)
        hung = runner.is_alive()
    finally:
        release.set()
    runner.join(DEADLINE)
    release.clear()
    assert not hung, "run_sync waited for the abandoned call's thread"
    assert time.monotonic() - started < DEADLINE
    outcome = box[0]
    assert isinstance(outcome, RunOutcome)
    assert outcome.status == "finished"
    assert [e.call_id for e in outcome.events if isinstance(e, ToolCallUnknown)] != []
    assert_protocol_valid(outcome.events)


async def test_many_abandoned_blocking_calls_leave_room_for_the_next() -> None:
    """More stuck calls than any default executor has threads (min(32, cores + 4))."""
    stuck_calls = [call("stuck", id=f"s{i}", n=i) for i in range(36)]
    agent = Agent(
        model=ScriptedModel([stuck_calls, call("quick", id="q", n=41), finish("done")]),
        tools=[stuck, quick],
        limits=Limits(max_seconds=50, max_parallel_tools=36, max_tool_calls=40),
        policy=POLICY,
    )
    try:
        outcome = await asyncio.wait_for(agent.run("go"), DEADLINE)
    finally:
        release.set()
    await asyncio.sleep(0.1)
    release.clear()
    results = {e.call_id: e for e in outcome.events if isinstance(e, ToolCallFinished)}
    assert outcome.status == "finished"
    assert not results["q"].is_error, results["q"].content
    assert results["q"].structured == 42
    unknown = [e for e in outcome.events if isinstance(e, ToolCallUnknown)]
    assert len(unknown) == 36, [(e.call_id, e.error_type, e.content) for e in results.values()][:3]


seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


@tool(read_only=True, open_world=False)
def context_reader() -> str:
    """What the caller's context variable holds."""
    return seen.get()


async def test_a_blocking_tool_sees_the_callers_context_variables() -> None:
    seen.set("the caller's")
    agent = Agent(
        model=ScriptedModel([call("context_reader"), finish("ok")]),
        tools=[context_reader],
        policy=POLICY,
    )
    outcome = await agent.run("go")
    result = next(e for e in outcome.events if isinstance(e, ToolCallFinished))
    assert result.content == (TextBlock(text="the caller's"),)


_PROGRAM = """
import time
from tether import Agent, Limits, RulePolicy, allow, tool
from tether.testing import ScriptedModel, call, finish

@tool(open_world=False, timeout=1)
def sleeper() -> str:
    \"\"\"Sleeps for an hour.\"\"\"
    time.sleep(3600)
    return "late"

agent = Agent(
    model=ScriptedModel([call("sleeper"), finish("gave up")]),
    tools=[sleeper],
    limits=Limits(max_seconds=30),
    policy=RulePolicy(None, allow(["*"], reason="a test")),
)
print(agent.run_sync("go").status, flush=True)
"""


async def test_a_program_whose_run_sync_abandoned_a_blocking_call_exits() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROGRAM,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[1],
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "finished"


@tool(open_world=False)
def writer(n: int) -> str:
    """Writes something, slowly (until the test releases it).

    Args:
        n: Which write.
    """
    release.wait(DEADLINE * 2)
    return "written"


@tool(read_only=True, open_world=False)
def reader(n: int) -> str:
    """Reads something, slowly (until the test releases it).

    Args:
        n: Which read.
    """
    release.wait(DEADLINE * 2)
    return "read"


async def cancelled_during(name: str) -> list[str]:
    agent = Agent(
        model=ScriptedModel([call(name, id="w", n=1), finish("done")]),
        tools=[writer, reader],
        policy=POLICY,
    )
    stream = agent.stream("go")
    kinds: list[str] = []

    async def cancel_soon() -> None:
        await asyncio.sleep(0.3)
        stream.cancel("stop it")

    canceller = asyncio.ensure_future(cancel_soon())
    try:
        async with asyncio.timeout(DEADLINE):
            async for event in stream:
                kinds.append(event.kind)
    finally:
        release.set()
        await canceller
    await asyncio.sleep(0.1)
    release.clear()
    assert stream.outcome.status == "cancelled"
    assert_protocol_valid(stream.outcome.events)
    return kinds


async def test_a_blocking_call_with_effects_in_flight_at_cancel_is_unknown() -> None:
    # before: answered as interrupted ("may have had partial effects"), as if it had stopped
    assert (await cancelled_during("writer"))[-2:] == ["tool_call_unknown", "run_finished"]


async def test_a_read_only_blocking_call_in_flight_at_cancel_is_answered() -> None:
    assert (await cancelled_during("reader"))[-2:] == ["tool_call_finished", "run_finished"]


async def test_a_blocking_call_that_never_got_its_slot_is_a_timeout_not_unknown() -> None:
    # before (a run's own call, not a parallel one): "may still be running, or have taken
    # effect", though the tool never ran: it waited for the policy's concurrency slot
    from tether.policy.rules import Concurrency, Rules

    ran: list[int] = []
    held, running = threading.Event(), threading.Event()

    @tool(name="capped", open_world=False, timeout=DEADLINE)
    def holding_call(n: int) -> str:
        """Blocks while the test holds it: the same tool for the policy (its name), with a
        timeout that outlasts the test, so the slot stays held however slow the machine.

        Args:
            n: Which call.
        """
        ran.append(n)
        running.set()
        held.wait(DEADLINE)
        return "done"

    @tool(open_world=False, timeout=0.3)
    def capped(n: int) -> str:
        """Never runs: it waits for the slot the other tool holds.

        Args:
            n: Which call.
        """
        ran.append(n)
        return "done"

    policy = RulePolicy(
        Rules(concurrency=(Concurrency(tools=("capped",), max=1),)),
        allow(["*"], reason="the test's"),
    )
    holder = Agent(
        model=ScriptedModel([call("capped", n=0), finish("x")]),
        tools=[holding_call],
        policy=policy,
    )
    holding = asyncio.ensure_future(holder.run("hold"))
    try:
        assert await asyncio.to_thread(running.wait, DEADLINE)  # the holder's call runs
        waiter = Agent(
            model=ScriptedModel([call("capped", n=1), finish("x")]), tools=[capped], policy=policy
        )
        outcome = await asyncio.wait_for(waiter.run("wait"), DEADLINE)
    finally:
        held.set()
        await holding
    assert not [e for e in outcome.events if isinstance(e, ToolCallUnknown)]
    (result,) = [e for e in outcome.events if isinstance(e, ToolCallFinished) and e.is_error]
    assert result.error_type == "timeout"
    assert "did not get a turn within 0.3s" in str(result.content)
    assert ran == [0]
