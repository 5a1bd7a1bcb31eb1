"""The run context the engine's collaborators share: its clock, its stops, its fold."""

from __future__ import annotations

import pytest

from tether import Agent, Limits, tool
from tether.events import RunStarted, ToolCallFinished, UserReplied
from tether.messages import ToolCall
from tether.run.base import Cancelled
from tether.run.context import RunContext
from tether.run.toolexec import run_tool
from tether.testing import FakeClock, ScriptedModel, finish


@tool(read_only=True, open_world=False)
async def noop() -> str:
    """Do nothing."""
    return "ok"


def _context(clock: FakeClock, limits: Limits) -> RunContext[str]:
    agent = Agent(name="ctx", model=ScriptedModel([finish("x")]), tools=[noop], limits=limits)
    return RunContext(
        agent.spec,
        "goal",
        run_id="r1",
        model=agent.resolved_model(),
        clock=clock,
        tool_runner=run_tool,
    )


def _started(ctx: RunContext[str]) -> None:
    spec = ctx.spec
    ctx.add(
        RunStarted,
        goal=ctx.goal,
        agent=spec.name,
        spec_digest=spec.digest,
        instructions=spec.instructions,
        model="m",
        tools=spec.tool_names,
        output_schema=spec.output.schema,
        limits=spec.limits,
    )


def test_time_is_the_budget_since_the_start_and_its_stop_says_so() -> None:
    clock = FakeClock()
    ctx = _context(clock, Limits(max_seconds=10))
    ctx.t0 = clock.monotonic()
    ctx.deadline = ctx.t0 + 10
    clock.advance(4)
    assert ctx.elapsed() == 4
    assert ctx.remaining() == 6
    clock.advance(7)
    assert ctx.remaining() == 0  # never negative
    stop = ctx.time_stop()
    assert (stop.status, stop.limit, stop.used, stop.maximum) == (
        "budget_exhausted",
        "max_seconds",
        11,
        10,
    )
    assert _context(clock, Limits(max_seconds=None)).remaining() is None


def test_a_cancel_request_unwinds_at_the_next_check() -> None:
    ctx = _context(FakeClock(), Limits())
    ctx.check_cancel()  # nobody asked: nothing happens
    ctx.interrupts.request("the caller's")
    with pytest.raises(Cancelled):
        ctx.check_cancel()


def test_the_fold_is_refolded_in_place_from_the_log() -> None:
    ctx = _context(FakeClock(), Limits())
    state = ctx.state
    _started(ctx)
    ctx.add(UserReplied, text="hello")
    assert ctx.journal.take()  # committed: a rollback keeps these
    ctx.add(UserReplied, text="not stored")
    assert state.last is not None
    assert state.last.seq == 2
    ctx.journal.rollback()
    ctx.refold()
    assert ctx.state is state  # the collaborators hold it: the same object, folded again
    assert state.last is ctx.journal.events[-1]
    assert state.last.seq == 1
    assert [m.kind for m in state.messages] == ["user"]  # the goal once: folded from the start


def test_a_refused_call_gets_a_synthetic_error_result() -> None:
    ctx = _context(FakeClock(), Limits())
    _started(ctx)
    ctx.refuse(ToolCall(id="c1", name="noop", arguments={}), "not executed", "denied")
    event = ctx.journal.events[-1]
    assert isinstance(event, ToolCallFinished)
    assert (event.call_id, event.is_error, event.synthetic) == ("c1", True, True)
    assert "c1" not in ctx.state.pending
