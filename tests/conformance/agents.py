"""The agent ``tether mcp serve`` exposes to the conformance suite's server checks."""

from __future__ import annotations

from tether import Agent, tool
from tether.testing import ScriptedModel, call, finish


@tool(read_only=True, open_world=False)
def look(what: str) -> str:
    """Looks at something.

    Args:
        what: What to look at.
    """
    return f"saw {what}"


agent = Agent(
    name="looker",
    instructions="Looks at what the goal names.",
    model=ScriptedModel([call("look", what="the goal"), finish("seen")] * 50),
    tools=[look],
)
