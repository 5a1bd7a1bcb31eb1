"""Retries are counted per tool: one tool failing in a row stops the run even when another
tool succeeds between its failures, and a tool can set its own bound (``@tool(retries=)``)."""

from __future__ import annotations

import pytest

from tests.support import add, assert_protocol_valid
from tether import Agent, ModelRetry, tool
from tether.errors import ConfigError
from tether.events import LimitReached, ToolCallFinished
from tether.limits import Limits
from tether.testing import ScriptedModel, call, finish
from tether.tools import Tool


@tool(read_only=True, open_world=False)
def parse(text: str) -> str:
    """Parse a text (this one never can).

    Args:
        text: The text.
    """
    raise ModelRetry(f"cannot parse {text!r}: write plain arithmetic")


@tool(read_only=True, open_world=False, retries=1)
def picky(text: str) -> str:
    """Parse a text, with one retry allowed.

    Args:
        text: The text.
    """
    raise ModelRetry("no")


def _doom_loop(tool_name: str, times: int) -> list[object]:
    """The embedded model's loop in bench/tasks.py: a good read, then the same bad call."""
    steps: list[object] = []
    for _ in range(times):
        steps += [call("add", a=1, b=2), call(tool_name, text="len(lines)")]
    return steps


async def test_one_tool_failing_in_a_row_stops_even_with_successes_between() -> None:
    model = ScriptedModel([*_doom_loop("parse", 10), finish("best effort")])  # type: ignore[list-item]
    agent = Agent(model=model, tools=[add, parse], limits=Limits(max_steps=30, max_retries=3))
    outcome = await agent.run("count the lines")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_retries"
    [reached] = [e for e in outcome.events if isinstance(e, LimitReached)]
    assert (reached.used, reached.maximum) == (4, 3)
    failures = [
        e
        for e in outcome.events
        if isinstance(e, ToolCallFinished) and e.error_type == "model_retry"
    ]
    assert len(failures) == 4  # not the 10 the script would go on to, nor max_steps
    assert_protocol_valid(outcome.events)


async def test_a_tool_sets_its_own_bound() -> None:
    model = ScriptedModel([*_doom_loop("picky", 5), finish("best effort")])  # type: ignore[list-item]
    agent = Agent(model=model, tools=[add, picky], limits=Limits(max_retries=3))
    outcome = await agent.run("count the lines")
    assert outcome.limit == "max_retries"
    failures = [
        e
        for e in outcome.events
        if isinstance(e, ToolCallFinished) and e.error_type == "model_retry"
    ]
    assert len(failures) == 2  # retries=1: the second failure in a row is one too many


async def test_a_tools_success_resets_its_own_count() -> None:
    flaky_results = iter([True, True, False, True, True, False, True, True, False])

    @tool(read_only=True, open_world=False)
    def flaky(text: str) -> str:
        """Sometimes works.

        Args:
            text: The text.
        """
        if next(flaky_results):
            raise ModelRetry("try again")
        return "ok"

    script = [call("flaky", text="x") for _ in range(9)]
    agent = Agent(
        model=ScriptedModel([*script, finish("done")]),
        tools=[flaky],
        limits=Limits(max_retries=2),
    )
    outcome = await agent.run("go")
    assert outcome.status == "finished"  # never more than 2 failures in a row


def _noop() -> str:
    """Nothing."""
    return "x"


@pytest.mark.parametrize("bad", [-1, "3", 1.5, True])
def test_a_bad_retries_setting_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="retries takes a whole number"):
        tool(retries=bad)(_noop)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="retries takes a whole number"):
        Tool.from_schema(
            name="t",
            description="d",
            input_schema={"type": "object"},
            handler=lambda ctx, args: None,  # type: ignore[arg-type, return-value]
            retries=bad,  # type: ignore[arg-type]
        )
