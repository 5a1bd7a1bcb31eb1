"""No tool can hang a run: ``tool_timeout`` and ``max_seconds`` hold whatever the tool does.

A tool that ignores cancellation is abandoned after a short grace (its outcome recorded
honestly: unknown when it may have side effects); an ``async`` tool that blocks the event
loop past its timeout ends the run with a clear reason; ``SystemExit`` from a tool is a tool
error and ``KeyboardInterrupt`` cancels the run, logged, before it propagates.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from tests.support import assert_protocol_valid
from tether import Agent, Limits, RulePolicy, Tool, allow, tool
from tether.events import RunFinished, ToolCallFinished, ToolCallUnknown
from tether.outcome import RunOutcome
from tether.testing import ScriptedModel, call, finish

LIMITS = Limits(tool_timeout=1, max_seconds=20)
POLICY = RulePolicy(None, allow(["*"], reason="the tests' own tools"))
DEADLINE = 60.0
"""Seconds a test waits for an outcome before it calls the run hung (it would be forever)."""


@tool(open_world=False)
async def stubborn(n: int) -> str:
    """Ignores every cancellation (a side effect in flight that will not stop).

    Args:
        n: Which call.
    """
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


@tool(read_only=True, open_world=False)
async def stubborn_reader(n: int) -> str:
    """A read-only tool that ignores cancellation.

    Args:
        n: Which call.
    """
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


async def run(agent: Agent, goal: str = "go") -> RunOutcome:
    return await asyncio.wait_for(agent.run(goal), DEADLINE)


async def test_a_tool_that_ignores_cancellation_is_abandoned_and_recorded_as_unknown() -> None:
    agent = Agent(
        model=ScriptedModel([call("stubborn", n=1), finish("gave up")]),
        tools=[stubborn],
        limits=LIMITS,
        policy=POLICY,
    )
    outcome = await run(agent)
    assert outcome.status == "finished"
    unknown = [e for e in outcome.events if isinstance(e, ToolCallUnknown)]
    assert len(unknown) == 1
    assert "ignored" in unknown[0].reason
    assert_protocol_valid(outcome.events)


async def test_a_read_only_tool_that_ignores_cancellation_gets_a_timeout_error() -> None:
    agent = Agent(
        model=ScriptedModel([call("stubborn_reader", n=1), finish("gave up")]),
        tools=[stubborn_reader],
        limits=LIMITS,
        policy=POLICY,
    )
    outcome = await run(agent)
    (result,) = [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool != "finish_task"
    ]
    assert result.is_error
    assert result.error_type == "timeout"
    assert "ignored" in str(result.content)


async def test_max_seconds_holds_when_parallel_calls_ignore_cancellation() -> None:
    agent = Agent(
        model=ScriptedModel([[call("stubborn", n=1), call("stubborn_reader", n=2)], finish("x")]),
        tools=[stubborn, stubborn_reader],
        limits=Limits(tool_timeout=60, max_seconds=2),
        policy=POLICY,
    )
    started = time.monotonic()
    outcome = await run(agent)
    # the run's limit and the grace (about 3 s), with room for a busy machine; without the
    # limit the run would wait for the tool timeout (60 s)
    assert time.monotonic() - started < 30
    assert outcome.status in ("budget_exhausted", "finished")
    assert_protocol_valid(outcome.events)


async def test_an_async_tool_that_blocks_the_loop_past_its_timeout_ends_the_run() -> None:
    @tool(read_only=True, open_world=False)
    async def sleepy(n: int) -> str:
        """Blocks the event loop (a blocking call in an async tool).

        Args:
            n: Which call.
        """
        time.sleep(4)  # noqa: ASYNC251 - the fault under test
        return "slept"

    agent = Agent(
        model=ScriptedModel([call("sleepy", n=1), finish("x")]),
        tools=[sleepy],
        limits=LIMITS,
        policy=POLICY,
    )
    outcome = await run(agent)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "LoopBlocked"
    assert "blocked the event loop" in outcome.error.message
    (result,) = [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "sleepy"
    ]
    assert result.error_type == "loop_blocked"  # not the result it returned too late


async def test_a_tool_raising_system_exit_is_a_tool_error() -> None:
    @tool(read_only=True, open_world=False)
    async def quitter(n: int) -> str:
        """Calls sys.exit.

        Args:
            n: Which call.
        """
        raise SystemExit(3)

    agent = Agent(
        model=ScriptedModel([call("quitter", n=1), finish("x")]),
        tools=[quitter],
        policy=POLICY,
    )
    outcome = await run(agent)
    assert outcome.status == "finished"
    (result,) = [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "quitter"
    ]
    assert result.is_error
    assert "sys.exit(3)" in str(result.content)


@tool(read_only=True, open_world=False, name="ctrl_c")
async def ctrl_c_async(n: int) -> str:
    """Stands for Ctrl-C arriving while the tool runs.

    Args:
        n: Which call.
    """
    raise KeyboardInterrupt


@tool(read_only=True, open_world=False, name="ctrl_c")
def ctrl_c_thread(n: int) -> str:
    """Stands for Ctrl-C arriving while the tool runs (in a worker thread).

    Args:
        n: Which call.
    """
    raise KeyboardInterrupt


@pytest.mark.parametrize("chosen", [ctrl_c_async, ctrl_c_thread], ids=["async", "thread"])
async def test_a_tool_raising_keyboard_interrupt_cancels_the_run_and_logs_it(chosen: Tool) -> None:
    agent = Agent(model=ScriptedModel([call("ctrl_c", n=1), finish("x")]), tools=[chosen])
    stream = agent.stream("go")
    with pytest.raises(KeyboardInterrupt):
        async for _ in stream:
            pass
    outcome = stream.outcome
    assert outcome.status == "cancelled"
    assert isinstance(outcome.events[-1], RunFinished)
    assert outcome.error is not None
    assert "KeyboardInterrupt" in outcome.error.message
    assert_protocol_valid(outcome.events)


_PROGRAM = """
import asyncio
from tests.test_tool_containment import LIMITS, POLICY, stubborn
from tether import Agent
from tether.testing import ScriptedModel, call, finish

agent = Agent(
    model=ScriptedModel([call("stubborn", n=1), finish("gave up")]),
    tools=[stubborn],
    limits=LIMITS,
    policy=POLICY,
)
print(asyncio.run(agent.run("go")).status, flush=True)
"""


async def test_a_program_whose_run_abandoned_a_call_still_exits() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROGRAM,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[1],
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "finished"
    assert "Traceback" not in err.decode()
    # one line that names it, not asyncio's "Task was destroyed but it is pending!" and a repr
    assert "Task was destroyed" not in err.decode()
    assert "the abandoned call of tool 'stubborn' (run " in err.decode()
    assert "never finished: the program exited first" in err.decode()
