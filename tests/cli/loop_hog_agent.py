"""An agent whose async tool blocks the event loop for a minute (``tether run --agent``).

The tool touches ``$TETHER_TEST_STARTED`` when it starts, so a test knows when to press Ctrl-C;
its timeout is long, so only Ctrl-C ends it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tether import Agent, Limits, RulePolicy, allow, tool
from tether.testing import ScriptedModel, call, finish


@tool(open_world=False)
async def hold(seconds: int) -> str:
    """Holds the event loop (blocking code called from async code).

    Args:
        seconds: How long.
    """
    Path(os.environ["TETHER_TEST_STARTED"]).touch()
    time.sleep(seconds)  # noqa: ASYNC251 - the fault under test
    return "released"


agent = Agent(
    name="holder",
    model=ScriptedModel([call("hold", seconds=60), finish("done")]),
    tools=[hold],
    limits=Limits(tool_timeout=300, max_seconds=600),
    policy=RulePolicy(None, allow(["hold"], reason="the test's own tool")),
)
