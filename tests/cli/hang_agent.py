"""An agent whose tool blocks the event loop for an hour (``tether run --agent`` loads it)."""

from __future__ import annotations

import time

from tether import Agent, Limits, RulePolicy, allow, tool
from tether.testing import ScriptedModel, call, finish


@tool(open_world=False)
async def hog(n: int) -> str:
    """Calls blocking code from async code, and never gives the loop back in time.

    Args:
        n: Which call.
    """
    time.sleep(3600)  # noqa: ASYNC251 - the fault under test
    return "never"


agent = Agent(
    name="hog",
    model=ScriptedModel([call("hog", n=1), finish("done")]),
    tools=[hog],
    limits=Limits(tool_timeout=1, max_seconds=2),
    policy=RulePolicy(None, allow(["hog"], reason="the test's own tool")),
)
