"""Budget warnings: a ``budget_warning`` once a run has used a set fraction of a limit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import add, send_money
from tether import Agent, Approval, ConfigError, Event, Limits, RulePolicy, require_approval, tool
from tether.events import BudgetWarning
from tether.messages import ToolCall
from tether.replay import replay
from tether.stores import SqliteStore
from tether.testing import FakeClock, ScriptedModel, call, finish
from tether.usage import Usage


def _warnings(events: Sequence[Event]) -> list[tuple[str, float, float]]:
    return [(e.limit, e.used, e.maximum) for e in events if isinstance(e, BudgetWarning)]


def _adds(n: int) -> list[ToolCall]:
    return [call("add", a=i, b=1) for i in range(n)]


@pytest.mark.parametrize(
    ("limits", "usage", "adds", "expected"),
    [
        # before step 4 of 5: the step about to be taken is the 4th (80%)
        (Limits(max_steps=5), Usage(), 3, [("max_steps", 3.0, 5.0)]),
        (Limits(max_tool_calls=5), Usage(), 5, [("max_tool_calls", 4.0, 5.0)]),
        # output tokens only: no input count for a request's size to rest on (a scripted
        # model's fixed input count would refuse the fifth request as too large)
        (Limits(max_tokens=500), Usage(output_tokens=100), 4, [("max_tokens", 400.0, 500.0)]),
        (Limits(max_cost=1.2), Usage(cost=0.25), 4, [("max_cost", 1.0, 1.2)]),
    ],
)
async def test_a_limit_warns_once_at_80_percent(
    limits: Limits, usage: Usage, adds: int, expected: list[tuple[str, float, float]]
) -> None:
    model = ScriptedModel([*_adds(adds), finish("done")], usage=usage)
    outcome = await Agent(name="b", model=model, tools=[add], limits=limits).run("add")
    assert outcome.status == "finished", outcome
    assert _warnings(outcome.events) == expected


def _ticking(clock: FakeClock, seconds: float) -> object:
    @tool(read_only=True, open_world=False)
    def tick() -> str:
        """Take some time."""
        clock.advance(seconds)
        return "ticked"

    return tick


async def test_the_runs_time_warns_and_a_replay_takes_its_own_time() -> None:
    clock = FakeClock()
    agent = Agent(
        name="t",
        model=ScriptedModel([call("tick"), call("tick"), call("tick"), finish("late")]),
        tools=[_ticking(clock, 3.0)],  # pyright: ignore[reportArgumentType]
        limits=Limits(max_seconds=10),
    )
    outcome = await agent.run("take your time", clock=clock)
    assert outcome.status == "finished"
    assert _warnings(outcome.events) == [("max_seconds", 9.0, 10.0)]
    report = await replay(list(outcome.events), agent=agent)  # real time: no warning
    assert report.ok, report.divergence


async def test_several_fractions_each_warn_once_and_a_jump_warns_for_the_highest() -> None:
    model = ScriptedModel([*_adds(9), finish("done")])
    agent = Agent(
        name="f",
        model=model,
        tools=[add],
        limits=Limits(max_tool_calls=10),
        budget_warnings=(0.9, 0.5),
    )
    outcome = await agent.run("add")
    assert _warnings(outcome.events) == [
        ("max_tool_calls", 5.0, 10.0),
        ("max_tool_calls", 9.0, 10.0),
    ]
    jumpy = Agent(
        name="j",
        model=ScriptedModel([*_adds(2), finish("done")], usage=Usage(input_tokens=600)),
        tools=[add],
        limits=Limits(max_tokens=1000),
        budget_warnings=(0.5, 0.6, 0.9),
    )
    outcome = await jumpy.run("add")
    assert outcome.status == "budget_exhausted"  # 1,200 tokens before the third step
    assert _warnings(outcome.events) == [("max_tokens", 600.0, 1000.0)]  # 50% and 60%: once


async def test_no_fractions_no_warnings() -> None:
    model = ScriptedModel([*_adds(3), finish("done")])
    agent = Agent(
        name="n", model=model, tools=[add], limits=Limits(max_steps=4), budget_warnings=()
    )
    outcome = await agent.run("add")
    assert outcome.status == "finished"
    assert _warnings(outcome.events) == []


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.2, True, "0.8"])
def test_fractions_are_between_0_and_1(value: object) -> None:
    with pytest.raises(ConfigError, match="fractions of a limit between 0 and 1"):
        Agent(name="x", budget_warnings=(value,))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fractions of a limit between 0 and 1"):
        Agent(name="x", budget_warnings=value)  # type: ignore[arg-type]


def test_one_number_is_that_one_fraction() -> None:
    assert Agent(name="x", budget_warnings=0.5).spec.budget_warnings == (0.5,)
    assert Agent(name="x", budget_warnings=[0.9, 0.5]).spec.budget_warnings == (0.5, 0.9)


def test_the_default_keeps_the_agents_digest() -> None:
    default = Agent(name="d").spec.digest
    assert Agent(name="d", budget_warnings=(0.8,)).spec.digest == default
    assert Agent(name="d", budget_warnings=[0.8, 0.8]).spec.digest == default
    assert Agent(name="d", budget_warnings=(0.5,)).spec.digest != default


async def test_a_resumed_run_does_not_warn_again(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    model = ScriptedModel(
        [*_adds(4), call("send_money", iban="DE89370400440532013000"), finish("paid")]
    )
    agent = Agent(
        name="r",
        model=model,
        tools=[add, send_money],
        policy=RulePolicy(None, require_approval(["send_money"])),
        limits=Limits(max_tool_calls=5),
        store=store,
    )
    try:
        waiting = await agent.run("add, then pay")
        assert waiting.status == "waiting_for_approval"
        assert _warnings(waiting.events) == [("max_tool_calls", 4.0, 5.0)]
        done = await agent.resume(waiting.run_id, approvals=[Approval.approve(waiting.pending[0])])
    finally:
        await store.close()
    assert done.status == "finished", done
    assert _warnings(done.events) == [("max_tool_calls", 4.0, 5.0)]  # the one from before
