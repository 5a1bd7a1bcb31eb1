"""A run whose calls the default policy denied says so in ``outcome.warnings``."""

from __future__ import annotations

from dataclasses import replace

from tether import Agent, tool
from tether.testing import ScriptedModel, call, finish


@tool
def unannotated(x: int) -> int:
    """Does something nobody declared.

    Args:
        x: A number.
    """
    return x


async def test_default_denials_are_named_in_the_warnings() -> None:
    outside = replace(unannotated, definition=replace(unannotated.definition, origin="mcp:x"))
    model = ScriptedModel([call("unannotated", x=1), finish("could not")])
    outcome = await Agent(model=model, tools=[outside]).run("go")
    assert outcome.status == "finished"
    assert len(outcome.warnings) == 1
    assert "the default policy denied calls to unannotated" in outcome.warnings[0]
    assert "allow([...])" in outcome.warnings[0]


async def test_the_developers_own_tool_runs_without_a_warning() -> None:
    model = ScriptedModel([call("unannotated", x=1), finish("ran")])
    outcome = await Agent(model=model, tools=[unannotated]).run("go")
    assert (outcome.status, outcome.tool_calls, outcome.warnings) == ("finished", 1, ())


async def test_no_warning_when_nothing_was_denied_by_default() -> None:
    outcome = await Agent(model=ScriptedModel([finish("done")])).run("go")
    assert outcome.warnings == ()
